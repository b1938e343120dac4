/**
 * SIP gateway load: sipp calls the gateway at a rising call rate (each call 100 ms long,
 * header room, recorded and billed in PostgreSQL) and the run prints, per rate, whether
 * every call succeeded and the p50/p99 time from INVITE to 200 OK. The reference is sipp's
 * own built-in UAS driven by the same scenario at the same rate on this machine, so the
 * ratio says what the gateway costs over a SIP stack that does nothing. The gateway runs in
 * this process, so the process's CPU time per call, counted until every record of the step
 * is stored, is the gateway's (sipp runs apart): steadier than latency on a busy machine.
 *
 *   bun test/bench/sip.bench.ts        (needs PostgreSQL and Redis, like the tests)
 *   BENCH_RATES=200,600 bun test/bench/sip.bench.ts   (only these rates)
 */
export {};

process.env.DATABASE_URL =
  process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
process.env.REDIS_URL ??= "redis://127.0.0.1:6379";
process.env.REDIS_PREFIX = `parley-bench-${process.pid}`;
process.env.LOG_LEVEL ??= "error";
process.env.BOOTSTRAP_ACCOUNT = "false";

// Built as the SIP role's process is (src/process/root.ts). The fold queue that the usage events ring holds a
// Redis connection of its own: the process's stop closes it too.
const services = await (await import("../../src/process/root")).buildProcess("sip");
const { migrate } = await import("../../src/db/migrate");
const { createAccount } = await import("../../src/modules/accounts/service");
const { startTestGateway } = await import("../support/sip-gateway");
const { runSipp } = await import("../support/sipp");
const { freePort } = await import("../support/ports");
const { db } = await import("../../src/db/client");
const { rowsOf } = await import("../../src/db/rows");
const { sql } = await import("drizzle-orm");

const RATES = process.env.BENCH_RATES
  ? process.env.BENCH_RATES.split(",").map(Number)
  : [25, 50, 100, 200, 300, 400, 600, 800];
const SECONDS_PER_STEP = 4;
const HOLD_MS = 100;

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/** sipp's -trace_rtt CSV: Date_ms;response_time_ms;rtd_no, in whole milliseconds. */
function responseTimes(csv: string): number[] {
  return csv
    .split("\n")
    .map((line) => line.split(";"))
    .filter((fields) => fields.length >= 3 && /^[0-9.]+$/.test(fields[1]!))
    .map((fields) => Number(fields[1]))
    .sort((a, b) => a - b);
}

interface Step {
  rate: number;
  ok: boolean;
  p50: number;
  p99: number;
  /** This process's CPU time (the gateway's: sipp runs apart) per call, in ms, until the records are written. */
  cpuMsPerCall: number;
}

let callsMade = 0;

/** Waits until every call made so far has its record stored with its end (the writer works behind the signalling). */
async function recordsSettled(): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    const [row] = rowsOf<{ ended: number }>(
      await db.execute(
        sql`select count(*)::int as ended from sip_calls where account_id = ${account.id} and ended_at is not null`,
      ),
    );
    if ((row?.ended ?? 0) >= callsMade) return;
    await Bun.sleep(100);
  }
  console.log(`  records still open a minute after the step`);
}

/** One step against `port`; `gateway` when that is the gateway (its calls are recorded), not sipp's UAS. */
async function load(port: number, rate: number, gateway: boolean): Promise<Step> {
  const calls = rate * SECONDS_PER_STEP;
  const cpuBefore = process.cpuUsage();
  const run = await runSipp({
    scenario: "load_call.xml",
    port,
    service: "gateway",
    keys: { extra_header: "Parley-Conference-Room: bench" },
    calls,
    rate,
    holdMs: HOLD_MS,
    timeoutSeconds: SECONDS_PER_STEP + 20,
    extra: ["-trace_rtt", "-rtt_freq", "1", "-l", String(rate * 2)],
  });
  if (gateway) {
    callsMade += calls;
    // The records are written behind the signalling: their CPU counts once they are all in.
    await recordsSettled();
  }
  const cpu = process.cpuUsage(cpuBefore);
  const times = responseTimes(run.rtt);
  if (run.code !== 0)
    console.log(
      `  sipp exited ${run.code} at ${rate} calls/s: ` +
        `${(run.errors || run.output).split("\n").slice(0, 6).join(" | ").slice(0, 600)}`,
    );
  return {
    rate,
    ok: run.code === 0 && times.length === calls,
    p50: percentile(times, 50),
    p99: percentile(times, 99),
    cpuMsPerCall: (cpu.user + cpu.system) / 1000 / calls,
  };
}

async function loadReference(rate: number): Promise<Step> {
  const port = await freePort();
  const calls = rate * SECONDS_PER_STEP;
  const uas = Bun.spawn(
    [
      "sipp",
      "-sn",
      "uas",
      "-i",
      "127.0.0.1",
      "-p",
      String(port),
      "-m",
      String(calls),
      "-timeout",
      `${SECONDS_PER_STEP + 25}s`,
      "-nostdin",
      "-bg",
    ],
    {
      cwd: "/tmp",
      stdout: "ignore",
      stderr: "ignore",
    },
  );
  await uas.exited;
  await Bun.sleep(200);
  const step = await load(port, rate, false);
  return step;
}

await migrate();
const { account } = await createAccount(`bench-${crypto.randomUUID().slice(0, 8)}`, "EdDSA");
const running = await startTestGateway({
  accountId: account.id,
  requestsPerSecond: 0,
  maxCalls: 100_000,
  ackTimeoutMs: 32_000,
});

console.log(`SIP gateway benchmark: ${SECONDS_PER_STEP} s per step, calls of ${HOLD_MS} ms, UDP on loopback`);
console.log(
  "rate (calls/s) | gateway: all ok, p50, p99 INVITE→200 (ms), CPU " +
    "per call (ms) | sipp UAS reference: all ok, p99 (ms) | p99 ratio",
);
/** Past this, calls only "succeed" through SIP retransmissions: the gateway is saturated. */
const RESPONSIVE_P99_MS = 500;
// A first step, not reported, so the first rate is not charged
// for compiling the gateway's code and opening its connections.
await load(running.port, 50, true);
let best: Step | undefined;
let bestReference: Step | undefined;
let responsive: Step | undefined;
for (const rate of RATES) {
  const step = await load(running.port, rate, true);
  const reference = await loadReference(rate);
  // sipp times in whole milliseconds: a reference under 1 ms counts as 1 ms.
  const ratio = step.p99 / Math.max(reference.p99, 1);
  console.log(
    `${String(rate).padStart(14)} | ${step.ok ? "yes" : "NO "}  ${step.p50.toFixed(0).padStart(8)} ` +
      `${step.p99.toFixed(0).padStart(8)} ${step.cpuMsPerCall.toFixed(2).padStart(6)} | ` +
      `${reference.ok ? "yes" : "NO "} ${reference.p99.toFixed(0).padStart(8)} | ${ratio.toFixed(1)}×`,
  );
  if (!step.ok) break;
  best = step;
  if (step.p99 <= RESPONSIVE_P99_MS && (!responsive || step.rate > responsive.rate)) responsive = step;
  bestReference = reference;
}
if (best) {
  console.log(
    `highest rate with no failed call: ${best.rate} calls/s; p99 INVITE→200 ` +
      `${best.p99.toFixed(0)} ms (sipp UAS reference ${bestReference!.p99.toFixed(0)} ms)`,
  );
  console.log(
    responsive
      ? `highest rate with no failed call and p99 under ${RESPONSIVE_P99_MS} ms: ` +
          `${responsive.rate} calls/s (p99 ${responsive.p99.toFixed(0)} ms)`
      : `no rate kept p99 under ${RESPONSIVE_P99_MS} ms`,
  );
} else {
  console.log(`no rate passed: even ${RATES[0]} calls/s had a failed call`);
}

await running.stop();
await services.stop();
