/**
 * Token generation throughput: `bun test/bench/token.bench.ts`.
 * In one run, with wrk as the one load tool against one API pool (API_PROCESSES=2, the
 * machine's cores), it drives POST generate-token for an RS256 and an EdDSA account and
 * the bare /healthz route, measures raw in-process signing on the same number of cores (just
 * before and just after the routes, ratios against the mean), and prints the ratios against the targets:
 *   RS256 token req/s ≥ 0.9 × raw signs/s  (limits and HTTP cost at most a tenth over signing)
 *   EdDSA token req/s ≥ 0.7 × bare req/s  (with the per-account limits counted)
 * Then the floor of each: the same app in a pool of its own (test/bench/token/sign-only.ts) with
 * a route that only signs, which no token route can beat; the token routes against it show what
 * they add to a signature.
 */
import { cpus, tmpdir } from "node:os";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { type BenchAlgorithm, benchKey, signBenchToken } from "./token/signing";

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const CORES = cpus().length;

process.env.DATABASE_URL ??= process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
process.env.LOG_LEVEL = "silent";

/** The route's own signer over the same claims, with nothing else around it. */
async function rawSignRate(algorithm: BenchAlgorithm): Promise<number> {
  const key = benchKey(algorithm);
  const deadline = performance.now() + SECONDS * 1000;
  let signed = 0;
  while (performance.now() < deadline) {
    signBenchToken(key);
    signed++;
  }
  return signed / SECONDS;
}

if (process.argv[2] === "--raw") {
  console.log(await rawSignRate(process.argv[3] as BenchAlgorithm));
  process.exit(0);
}

/** Raw signing on every core at once, as the API pool would use them. */
async function parallelRawRate(algorithm: BenchAlgorithm): Promise<number> {
  const runs = Array.from({ length: CORES }, () =>
    Bun.spawn([process.execPath, import.meta.path, "--raw", algorithm], { stdout: "pipe", env: process.env }),
  );
  const rates = await Promise.all(runs.map(async (run) => Number(await new Response(run.stdout).text())));
  return rates.reduce((sum, rate) => sum + rate, 0);
}

/**
 * CPU seconds the pool (the process and every process under it) has used, from /proc. On a
 * shared machine a route's CPU per request moves far less with others' load than its rate.
 */
function poolCpuSeconds(pid: number): number {
  let ticks = 0;
  const pending = [pid];
  while (pending.length > 0) {
    const id = pending.pop()!;
    try {
      // Fields after the command name's closing parenthesis: utime and stime are the 12th and 13th.
      const fields = readFileSync(`/proc/${id}/stat`, "utf8").split(") ")[1]!.split(" ");
      ticks += Number(fields[11]) + Number(fields[12]);
      for (const task of readdirSync(`/proc/${id}/task`)) {
        for (const child of readFileSync(`/proc/${id}/task/${task}/children`, "utf8").split(" "))
          if (child.trim()) pending.push(Number(child));
      }
    } catch {
      // A process that ended meanwhile: its time is gone from the sum either way.
    }
  }
  return ticks / 100;
}

interface Measured {
  rate: number;
  /** The pool's CPU time per request, in microseconds. */
  cpuMicros: number;
}

/** `pids`: the processes whose CPU the requests are charged with; the API pool unless given. */
async function wrk(url: string, body?: string, pids = [pool.pid]): Promise<Measured> {
  const args = ["wrk", "-t1", "-c32", `-d${SECONDS}s`, "--latency", url];
  if (body) {
    const script = join(tmpdir(), `parley-bench-${process.pid}.lua`);
    await Bun.write(
      script,
      `wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = ${JSON.stringify(body)}\n`,
    );
    args.push("-s", script);
  }
  const cpuOf = () => pids.reduce((sum, pid) => sum + poolCpuSeconds(pid), 0);
  const cpuBefore = cpuOf();
  const out = await new Response(Bun.spawn(args, { stdout: "pipe" }).stdout).text();
  const cpu = cpuOf() - cpuBefore;
  const rate = /Requests\/sec:\s+([\d.]+)/.exec(out)?.[1];
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1];
  if (!rate || non2xx) throw new Error(`wrk failed or got errors:\n${out}`);
  const requests = Number(/(\d+) requests in/.exec(out)?.[1]);
  return { rate: Number(rate), cpuMicros: (cpu / requests) * 1e6 };
}

const { migrate } = await import("../../src/db/migrate");
await migrate();
const { createAccount } = await import("../../src/modules/accounts/service");
const rsa = await createAccount("bench-rs256", "RS256");
const ed = await createAccount("bench-eddsa", "EdDSA");
// The bench measures throughput, not the per-key limits (docs/limits.md): lift them for its accounts.
const { setLimit } = await import("../../src/modules/limits/service");
for (const { account } of [rsa, ed]) {
  for (const name of ["requests.token", "requests.per_key", "tokens.per_key"] as const)
    await setLimit(account.id, name, 1_000_000_000);
}
const { freePort } = await import("../support/ports");
const { until } = await import("../support/wait");
const port = await freePort();
const pool = Bun.spawn([process.execPath, new URL("../../src/index.ts", import.meta.url).pathname], {
  env: {
    ...process.env,
    PORT: String(port),
    HOST: "127.0.0.1",
    API_PROCESSES: String(CORES),
    BOOTSTRAP_ACCOUNT: "false",
  },
  stdout: "ignore",
  stderr: "inherit",
});
const base = `http://127.0.0.1:${port}`;

/** Waits, for some 10 s at most, until `url` answers 2xx. */
const answering = (url: string) =>
  until(
    // Bounded: a connection accepted while a pool starts may never be answered.
    () =>
      fetch(url, { signal: AbortSignal.timeout(1_000) }).then(
        (r) => r.ok,
        () => false,
      ),
    Boolean,
    10_000,
    100,
  );
await answering(`${base}/readyz`);

/**
 * The floor's pool (see the header) for one algorithm: started, warmed, measured, stopped. With
 * `body`, the contract's floor (POST, see sign-only.ts) is measured too, after the signature's.
 */
async function signOnly(algorithm: BenchAlgorithm, body?: string): Promise<{ sign: Measured; contract?: Measured }> {
  const floorPort = await freePort();
  const processes = Array.from({ length: CORES }, () =>
    Bun.spawn([process.execPath, new URL("./token/sign-only.ts", import.meta.url).pathname], {
      env: { ...process.env, PORT: String(floorPort), SIGN_ALGORITHM: algorithm },
      stdout: "ignore",
      stderr: "inherit",
    }),
  );
  try {
    const url = `http://127.0.0.1:${floorPort}/sign-only`;
    await answering(url);
    // 15 s: a route of so little code is compiled sooner than the token routes, warmed for 30.
    const pids = processes.map((child) => child.pid);
    for (let round = 0; round < Math.ceil(15 / SECONDS); round++) await wrk(url, undefined, []);
    const sign = await wrk(url, undefined, pids);
    if (!body) return { sign };
    for (let round = 0; round < Math.ceil(15 / SECONDS); round++) await wrk(url, body, []);
    return { sign, contract: await wrk(url, body, pids) };
  } finally {
    for (const child of processes) child.kill("SIGTERM");
    await Promise.all(processes.map((child) => child.exited));
  }
}

try {
  const tokenBody = (apiKey: string) => JSON.stringify({ apiKey, user: { id: "bench", name: "Bench" } });
  // Warmed until JIT compilation settles: for some 30 s of load its threads keep a few per cent of each
  // process's core busy, which the RS256 route, a few thousand requests, would be charged with.
  for (let round = 0; round < Math.ceil(30 / SECONDS); round++)
    await wrk(`${base}/api/v1/misc/generate-token`, tokenBody((round % 2 ? ed : rsa).apiKey.apiKey));
  /** Raw signing with the pool stopped, so it has the cores to itself. */
  const rawRates = async () => {
    pool.kill("SIGSTOP");
    const rates = { rsa: await parallelRawRate("RS256"), ed: await parallelRawRate("EdDSA") };
    pool.kill("SIGCONT");
    return rates;
  };
  // Raw signing is measured just before and just after the routes, and each ratio is taken
  // against the mean: this machine's speed drifts within a run (a lone raw measure moved the RS256
  // ratio by a tenth between runs).
  const rawBefore = await rawRates();
  const bareRun = await wrk(`${base}/healthz`);
  const rsaRun = await wrk(`${base}/api/v1/misc/generate-token`, tokenBody(rsa.apiKey.apiKey));
  const edRun = await wrk(`${base}/api/v1/misc/generate-token`, tokenBody(ed.apiKey.apiKey));
  const [bare, rsaHttp, edHttp] = [bareRun.rate, rsaRun.rate, edRun.rate];
  pool.kill("SIGSTOP");
  const [rsaFloor, edFloors] = [await signOnly("RS256"), await signOnly("EdDSA", tokenBody(ed.apiKey.apiKey))];
  const floor = { rsa: rsaFloor.sign, ed: edFloors.sign, edContract: edFloors.contract! };
  pool.kill("SIGCONT");
  const rawAfter = await rawRates();
  const rsaRaw = (rawBefore.rsa + rawAfter.rsa) / 2;
  const edRaw = (rawBefore.ed + rawAfter.ed) / 2;

  const rows = [
    ["bare GET /healthz", bare, "", ""],
    ["raw RS256 signs", rsaRaw, "", ""],
    ["raw EdDSA signs", edRaw, "", ""],
    [
      "POST generate-token RS256",
      rsaHttp,
      `${(rsaHttp / rsaRaw).toFixed(2)} × raw RS256`,
      rsaHttp / rsaRaw >= 0.9 ? "ok (≥ 0.9)" : "BELOW 0.9",
    ],
    ["POST generate-token EdDSA", edHttp, `${(edHttp / edRaw).toFixed(2)} × raw EdDSA`, ""],
    [
      "EdDSA token vs bare route",
      edHttp,
      `${(edHttp / bare).toFixed(2)} × bare`,
      edHttp / bare >= 0.7 ? "ok (≥ 0.7)" : "BELOW 0.7",
    ],
  ] as const;
  console.log(`token benchmark: ${CORES} cores, ${SECONDS} s per run, wrk -t1 -c32`);
  console.log(
    `raw signs/s before and after the routes: RS256 ${rawBefore.rsa.toFixed(0)} and ${rawAfter.rsa.toFixed(0)}, ` +
      `EdDSA ${rawBefore.ed.toFixed(0)} and ${rawAfter.ed.toFixed(0)} (the rows below use the mean)`,
  );
  for (const [name, rate, ratio, verdict] of rows) {
    console.log(`${name.padEnd(28)} ${rate.toFixed(0).padStart(8)} /s  ${ratio.padEnd(20)} ${verdict}`);
  }
  // The same comparison by the pool's CPU per request, which others' load moves much less.
  console.log(
    `pool CPU per request: bare ${bareRun.cpuMicros.toFixed(1)} µs, RS256 ` +
      `${rsaRun.cpuMicros.toFixed(1)} µs, EdDSA ${edRun.cpuMicros.toFixed(1)} µs`,
  );
  console.log(`EdDSA token vs bare route by CPU: ${(bareRun.cpuMicros / edRun.cpuMicros).toFixed(2)} × bare`);
  // Raw signing keeps every core busy, so a signature's CPU is the cores' time over the signs.
  const rawRsaMicros = (CORES * 1e6) / rsaRaw;
  console.log(
    `RS256 token vs raw signing by CPU: ${(rawRsaMicros / rsaRun.cpuMicros).toFixed(2)} × raw ` +
      `(${rawRsaMicros.toFixed(1)} µs a signature)`,
  );
  console.log(
    `floor, a pool of the app with a route that only signs: RS256 ${floor.rsa.rate.toFixed(0)}/s = ` +
      `${(floor.rsa.rate / rsaRaw).toFixed(2)} × raw RS256 ` +
      `(by CPU ${(rawRsaMicros / floor.rsa.cpuMicros).toFixed(2)}, ` +
      `${floor.rsa.cpuMicros.toFixed(1)} µs a request), EdDSA ${floor.ed.rate.toFixed(0)}/s = ` +
      `${(floor.ed.rate / bare).toFixed(2)} × bare (by CPU ${(bareRun.cpuMicros / floor.ed.cpuMicros).toFixed(2)})`,
  );
  console.log(
    `the contract's floor, a route that reads the key from the body and writes the RateLimit headers: EdDSA ` +
      `${floor.edContract.rate.toFixed(0)}/s = ${(floor.edContract.rate / bare).toFixed(2)} × bare ` +
      `(by CPU ${(bareRun.cpuMicros / floor.edContract.cpuMicros).toFixed(2)}); the EdDSA route against it ` +
      `${(edHttp / floor.edContract.rate).toFixed(2)} × ` +
      `(by CPU ${(floor.edContract.cpuMicros / edRun.cpuMicros).toFixed(2)})`,
  );
  console.log(
    `token routes against their floor: RS256 ${(rsaHttp / floor.rsa.rate).toFixed(2)} × (by CPU ` +
      `${(floor.rsa.cpuMicros / rsaRun.cpuMicros).toFixed(2)}), EdDSA ${(edHttp / floor.ed.rate).toFixed(2)} × ` +
      `(by CPU ${(floor.ed.cpuMicros / edRun.cpuMicros).toFixed(2)})`,
  );
} finally {
  pool.kill("SIGTERM");
  await pool.exited;
}
process.exit(0);
