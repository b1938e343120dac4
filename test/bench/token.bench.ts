/**
 * Token generation throughput: `bun test/bench/token.bench.ts`.
 * With wrk as the one load tool against one API pool (API_PROCESSES=2, the machine's cores), it
 * drives POST generate-token for an RS256 and an EdDSA account and the bare /healthz route,
 * measures raw in-process signing on the same number of cores (just before and just after the
 * rounds, ratios against the mean), and prints the ratios against the targets:
 *   RS256 token req/s ≥ 0.9 × raw signs/s  (limits and HTTP cost at most a tenth over signing)
 *   EdDSA token req/s ≥ 0.7 × bare req/s  (with the per-account limits counted)
 * Beside it run the floors: the same app in pools of its own (test/bench/token/sign-only.ts),
 * with a route that only signs, one that does what the route's contract asks beyond a signature
 * (reads the key from the body, writes the RateLimit headers), and for EdDSA that again with the
 * account looked up and the limits counted. No token route can beat the first two; the
 * token routes against them show what they add, and the third what the limits cost.
 * This machine's speed drifts by a third within minutes, so each figure is taken in BENCH_ROUNDS
 * rounds (default 3): in each, every route and floor is measured once, the pools not under load
 * stopped (SIGSTOP), and each ratio is taken within the round; the medians are the verdicts.
 * Last it prints the bound by CPU: the bare route's work plus one signature, which no token route
 * can do for less, against each target.
 */
import { cpus, tmpdir } from "node:os";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { type BenchAlgorithm, benchKey, signBenchToken, TOKEN_ROUTE_LIMITS } from "./token/signing";

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
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

const { median, startBench } = await import("../support/bench");
await startBench();
const { createAccount } = await import("../../src/modules/accounts/service");
const rsa = await createAccount("bench-rs256", "RS256");
const ed = await createAccount("bench-eddsa", "EdDSA");
// The bench measures throughput, not the per-key limits (docs/limits.md): lift them for its accounts.
const { setLimit } = await import("../../src/modules/limits/service");
for (const { account } of [rsa, ed]) {
  for (const name of TOKEN_ROUTE_LIMITS) await setLimit(account.id, name, 1_000_000_000);
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

/** A floor's pool (see the header) for one algorithm: one process per core on one port. */
async function floorPool(algorithm: BenchAlgorithm) {
  const floorPort = await freePort();
  const processes = Array.from({ length: CORES }, () =>
    Bun.spawn([process.execPath, new URL("./token/sign-only.ts", import.meta.url).pathname], {
      env: { ...process.env, PORT: String(floorPort), SIGN_ALGORITHM: algorithm },
      stdout: "ignore",
      stderr: "inherit",
    }),
  );
  const url = `http://127.0.0.1:${floorPort}/sign-only`;
  await answering(url);
  const signal = (name: "SIGSTOP" | "SIGCONT") => {
    for (const child of processes) child.kill(name);
  };
  return {
    url,
    pids: processes.map((child) => child.pid),
    stop: () => signal("SIGSTOP"),
    resume: () => signal("SIGCONT"),
    async close() {
      signal("SIGCONT");
      for (const child of processes) child.kill("SIGTERM");
      await Promise.all(processes.map((child) => child.exited));
    },
  };
}

/** What one round measured: the API pool's routes, then (or first, every other round) the floors. */
interface Round {
  bare: Measured;
  rsaRoute: Measured;
  edRoute: Measured;
  rsaSign: Measured;
  rsaContract: Measured;
  edSign: Measured;
  edContract: Measured;
  edLimited: Measured;
}

const floors: Array<Awaited<ReturnType<typeof floorPool>>> = [];
try {
  const tokenBody = (apiKey: string) => JSON.stringify({ apiKey, user: { id: "bench", name: "Bench" } });
  const [rsaBody, edBody] = [tokenBody(rsa.apiKey.apiKey), tokenBody(ed.apiKey.apiKey)];
  const route = `${base}/api/v1/misc/generate-token`;
  // Warmed until JIT compilation settles: for some 30 s of load its threads keep a few per cent of each
  // process's core busy, which the RS256 route, a few thousand requests, would be charged with.
  for (let round = 0; round < Math.ceil(30 / SECONDS); round++) await wrk(route, round % 2 ? edBody : rsaBody);
  // The floors' pools start and warm while the API pool is stopped: 15 s each route, as they are little code.
  pool.kill("SIGSTOP");
  const rsaFloor = await floorPool("RS256");
  floors.push(rsaFloor);
  const edFloor = await floorPool("EdDSA");
  floors.push(edFloor);
  const limitedUrl = edFloor.url.replace(/sign-only$/, "sign-limited");
  for (let round = 0; round < Math.ceil(15 / SECONDS); round++) {
    await wrk(rsaFloor.url, undefined, []);
    await wrk(rsaFloor.url, rsaBody, []);
    await wrk(edFloor.url, undefined, []);
    await wrk(edFloor.url, edBody, []);
    await wrk(limitedUrl, edBody, []);
  }
  rsaFloor.stop();
  edFloor.stop();
  /** Raw signing with every pool stopped, so it has the cores to itself. */
  const rawRates = async () => ({ rsa: await parallelRawRate("RS256"), ed: await parallelRawRate("EdDSA") });
  const rawBefore = await rawRates();
  pool.kill("SIGCONT");

  const routes = async () => ({
    bare: await wrk(`${base}/healthz`),
    rsaRoute: await wrk(route, rsaBody),
    edRoute: await wrk(route, edBody),
  });
  const floorRuns = async () => {
    pool.kill("SIGSTOP");
    rsaFloor.resume();
    const rsaSign = await wrk(rsaFloor.url, undefined, rsaFloor.pids);
    const rsaContract = await wrk(rsaFloor.url, rsaBody, rsaFloor.pids);
    rsaFloor.stop();
    edFloor.resume();
    const edSign = await wrk(edFloor.url, undefined, edFloor.pids);
    const edContract = await wrk(edFloor.url, edBody, edFloor.pids);
    const edLimited = await wrk(limitedUrl, edBody, edFloor.pids);
    edFloor.stop();
    pool.kill("SIGCONT");
    return { rsaSign, rsaContract, edSign, edContract, edLimited };
  };
  const rounds: Round[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    if (round % 2 === 0) rounds.push({ ...(await routes()), ...(await floorRuns()) });
    else rounds.push({ ...(await floorRuns()), ...(await routes()) });
  }
  pool.kill("SIGSTOP");
  const rawAfter = await rawRates();
  pool.kill("SIGCONT");

  console.log(`token benchmark: ${CORES} cores, ${SECONDS} s per run, wrk -t1 -c32, ${ROUNDS} rounds`);
  console.log(
    `raw signs/s before and after the rounds: RS256 ${rawBefore.rsa.toFixed(0)} and ${rawAfter.rsa.toFixed(0)}, ` +
      `EdDSA ${rawBefore.ed.toFixed(0)} and ${rawAfter.ed.toFixed(0)} (the RS256 ratios use the mean)`,
  );
  for (const [i, r] of rounds.entries()) {
    console.log(
      `round ${i + 1}, a second: bare ${r.bare.rate.toFixed(0)}, RS256 route ${r.rsaRoute.rate.toFixed(0)}, ` +
        `EdDSA route ${r.edRoute.rate.toFixed(0)}, RS256 sign-only ${r.rsaSign.rate.toFixed(0)} ` +
        `and contract's floor ${r.rsaContract.rate.toFixed(0)}, ` +
        `EdDSA sign-only ${r.edSign.rate.toFixed(0)}, EdDSA contract's floor ${r.edContract.rate.toFixed(0)}, ` +
        `and with the limits ${r.edLimited.rate.toFixed(0)}`,
    );
  }
  // Raw signing as a measure, at the mean of its rates before and after the rounds: it keeps every core
  // busy, so a signature's CPU is the cores' time over the signs.
  const rawMeasure = (before: number, after: number): Measured => {
    const rate = (before + after) / 2;
    return { rate, cpuMicros: (CORES * 1e6) / rate };
  };
  const raw = rawMeasure(rawBefore.rsa, rawAfter.rsa);
  const edRaw = rawMeasure(rawBefore.ed, rawAfter.ed);
  /** `of` against `reference` in each round, by rate and by CPU per request, and the medians of both. */
  const ratio = (name: string, of: (r: Round) => [Measured, Measured], target?: number) => {
    const rates = rounds.map((r) => of(r)[0].rate / of(r)[1].rate);
    const mid = median(rates);
    const verdict = target === undefined ? "" : mid >= target ? `  ok (≥ ${target})` : `  BELOW ${target}`;
    const byCpu = median(rounds.map((r) => of(r)[1].cpuMicros / of(r)[0].cpuMicros));
    console.log(
      `${name.padEnd(42)} ${mid.toFixed(2)} × (rounds ${rates.map((x) => x.toFixed(2)).join(", ")}; ` +
        `by CPU ${byCpu.toFixed(2)})${verdict}`,
    );
  };
  ratio("RS256 token route / raw RS256 signing", (r) => [r.rsaRoute, raw], 0.9);
  ratio("EdDSA token route / bare route", (r) => [r.edRoute, r.bare], 0.7);
  ratio("RS256 sign-only / raw RS256 signing", (r) => [r.rsaSign, raw]);
  ratio("EdDSA sign-only / bare route", (r) => [r.edSign, r.bare]);
  ratio("EdDSA contract's floor / bare route", (r) => [r.edContract, r.bare]);
  ratio("RS256 contract's floor / raw RS256 signing", (r) => [r.rsaContract, raw]);
  ratio("RS256 token route / its sign-only floor", (r) => [r.rsaRoute, r.rsaSign]);
  ratio("RS256 token route / its contract's floor", (r) => [r.rsaRoute, r.rsaContract]);
  ratio("the contract's floor with limits / without", (r) => [r.edLimited, r.edContract]);
  ratio("EdDSA token route / the contract's floor", (r) => [r.edRoute, r.edContract]);
  // The bound no code can pass: any token route does at least the bare route's work and one
  // signature, so by CPU it costs at least their sum. The EdDSA target is against the bare route
  // (at most bare / sum), RS256's against raw signing (at most signature / sum). wrk's own CPU,
  // which the rates share with the pool on this machine, is left out: it is not the server's to save.
  const bare = median(rounds.map((r) => r.bare.cpuMicros));
  for (const [name, signature, reach, target] of [
    ["EdDSA", edRaw.cpuMicros, bare / (bare + edRaw.cpuMicros), 0.7],
    ["RS256", raw.cpuMicros, raw.cpuMicros / (bare + raw.cpuMicros), 0.9],
  ] as const) {
    const verdict = reach >= target ? `within reach of ${target}` : `OUT OF REACH of ${target}`;
    console.log(
      `${`${name}: bare route + one signature, by CPU`.padEnd(42)} at most ${reach.toFixed(2)} × ` +
        `(bare ${bare.toFixed(1)} µs, signature ${signature.toFixed(1)} µs)  ${verdict}`,
    );
  }
} finally {
  await Promise.all(floors.map((floor) => floor.close()));
  pool.kill("SIGCONT");
  pool.kill("SIGTERM");
  await pool.exited;
}
process.exit(0);
