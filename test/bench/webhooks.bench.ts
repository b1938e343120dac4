/**
 * Webhook delivery throughput and the outbox's cost. Run by hand:
 *
 *   BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley_webhooks bun test/bench/webhooks.bench.ts
 *
 * WIPES the database it is given. A receiver answering 204 runs in its own process. The
 * benchmark times BENCH_DELIVERIES (default 20,000) deliveries by one webhooks worker (claim,
 * sign, send, record) in BENCH_ROUNDS rounds (default 3) and, before and after each, the same
 * number of POSTs of a catalogue event by a bare fetch loop with WEBHOOK_WORKER_CONCURRENCY
 * requests in flight (2,000 took the bare loop some 60 ms, its first run half as fast as its
 * last). Each round also runs the worker's two floors (test/bench/webhooks/durable-floor.ts: the
 * least any worker must do to deliver at least once and keep a log, with a log row written a
 * delivery and with one row a batch), each between two more runs of the bare loop. It prints each
 * round's ratio against the bare runs around it, their median (target for the worker ≥ 0.5), the
 * worker against the floor that writes as it does, and the CPU time spent per delivery in each:
 * by this process (all its threads: the worker shares it with nothing else while it runs), by
 * PostgreSQL's backends for this database, by the receiver, and by the whole machine. Then it times
 * recordEvent inside the writing transaction with an endpoint
 * subscribed (sequence, event row and delivery row), BENCH_SAMPLES (default 2,000) times one
 * after another, and the event_sync route that writes through it, and prints p50 and p99 of
 * each (target for the outbox: p99 < 2 ms). Last, WRITERS (8) concurrent writers record events in their own
 * transactions, all for one account (whose sequence row orders them) and then each for its
 * own, to show what that ordering costs.
 *
 * PostgreSQL's own speed is printed beside the ratio, measured in the same run before the first round and after the
 * last: BENCH_SAMPLES round trips of `select 1` one after another, and as many one-row inserts, each its own
 * transaction committed as PostgreSQL commits by default (its WAL flushed). A worker's ratio on one machine is
 * compared with another's through them.
 */
import { benchDatabase, closeBench, median, startBench, wipeDatabase } from "../support/bench";

const databaseUrl = benchDatabase("BENCH_DATABASE_URL to a database this benchmark may wipe");
process.env.WEBHOOK_ALLOW_PRIVATE_NETWORKS = "true";
process.env.WEBHOOK_WORKER_CONCURRENCY ??= "16";

const DELIVERIES = Number(process.env.BENCH_DELIVERIES ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SAMPLES = Number(process.env.BENCH_SAMPLES ?? 2_000);
const CONCURRENCY = Number(process.env.WEBHOOK_WORKER_CONCURRENCY);

await wipeDatabase(databaseUrl);

const services = await startBench();
const { createAccount } = await import("../../src/modules/accounts/service");
const { createApp } = await import("../../src/process/app");
const { database, db } = await import("../../src/db/client");
const { recordEvent } = await import("../../src/modules/catalogue");
const { createEndpoint } = await import("../../src/modules/webhooks/service");
const { startWebhooksWorker } = await import("../../src/modules/webhooks/worker");
const { prepareFloor, runFloor } = await import("./webhooks/durable-floor");
const { freePort } = await import("../support/ports");
const { sql } = await import("drizzle-orm");

const port = await freePort();
const receiver = Bun.spawn(
  [
    process.execPath,
    "-e",
    // It counts what it received, so the benchmark can tell the worker's sends are done without asking the
    // database many times a second (a count of the log is milliseconds of PostgreSQL's CPU each time).
    `let received = 0; Bun.serve({ port: ${port}, hostname: "127.0.0.1", async fetch(r) { ` +
      `if (r.method === "GET") return new Response(String(received)); await r.text(); received++; ` +
      `return new Response(null, { status: 204 }); } }); console.log("ready");`,
  ],
  { stdout: "pipe", stderr: "inherit" },
);
await receiver.stdout.getReader().read();
const url = `http://127.0.0.1:${port}/hook`;

const percentile = (values: number[], p: number) =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor((p / 100) * values.length))]!;
const ms = (value: number) => `${value.toFixed(3)} ms`;
const received = async () => Number(await (await fetch(url)).text());
/** CPU time in µs a process has used so far (utime and stime, in clock ticks of 10 ms), 0 once it is gone. */
const processCpu = async (pid: number) => {
  const stat = await Bun.file(`/proc/${pid}/stat`)
    .text()
    .catch(() => "");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return stat ? (Number(fields[11]) + Number(fields[12])) * 10_000 : 0;
};
/** The CPU time of the receiver and of PostgreSQL's backends serving this database, in µs. */
const peersCpu = async () => {
  const backends = (await db.execute(
    sql`select pid from pg_stat_activity where datname = current_database()`,
  )) as unknown as Array<{ pid: number }>;
  const times = await Promise.all([receiver.pid, ...backends.map((backend) => backend.pid)].map(processCpu));
  return new Map([receiver.pid, ...backends.map((backend) => backend.pid)].map((pid, i) => [pid, times[i]!]));
};
/** µs spent between two peersCpu readings, by processes alive at the second. */
const spent = (before: Map<number, number>, after: Map<number, number>) =>
  [...after].reduce((sum, [pid, time]) => sum + time - (before.get(pid) ?? 0), 0);
/** µs the receiver spent between two peersCpu readings. */
const receiverSpent = (before: Map<number, number>, after: Map<number, number>) =>
  after.get(receiver.pid)! - before.get(receiver.pid)!;
/** The machine's busy CPU time so far, in µs, every process's (the receiver's and PostgreSQL's too). */
const machineCpu = async () => {
  const [cpu] = (await Bun.file("/proc/stat").text()).split("\n");
  const ticks = cpu!.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal: idle and iowait are not busy.
  const busy = ticks.slice(0, 8).reduce((sum, value, i) => (i === 3 || i === 4 ? sum : sum + value), 0);
  return (busy * 1_000_000) / 100;
};

try {
  // A bare fetch loop: the same body size, the same number in flight, nothing recorded. Timed
  // before and after the worker, since on a shared machine one short run varies a lot.
  const body = JSON.stringify({
    id: `evt_${"0".repeat(32)}`,
    type: "room.started",
    account_id: "acc",
    created_at: new Date().toISOString(),
    sequence: 1,
    data: { room: "bench", breakout_id: "", started_at: new Date().toISOString() },
  });
  /** CPU microseconds per delivery of each kind of run, summed over its runs (divided by their count when printed). */
  type Kind = "bare" | "worker" | "rows" | "batch";
  const cpu = new Map<Kind, { runs: number; own: number; peers: number; receiver: number; machine: number }>();
  /** Times `run` (which sends DELIVERIES) and adds its CPU to its kind's: answers its rate a second. */
  const timed = async (kind: Kind, run: () => Promise<void>) => {
    const ownStarted = process.cpuUsage();
    const machineStarted = await machineCpu();
    const peersStarted = await peersCpu();
    const started = performance.now();
    await run();
    const rate = DELIVERIES / ((performance.now() - started) / 1000);
    const own = process.cpuUsage(ownStarted);
    const machineEnded = await machineCpu();
    const peersEnded = await peersCpu();
    const sum = cpu.get(kind) ?? { runs: 0, own: 0, peers: 0, receiver: 0, machine: 0 };
    sum.runs++;
    sum.own += (own.user + own.system) / DELIVERIES;
    sum.machine += (machineEnded - machineStarted) / DELIVERIES;
    sum.peers += spent(peersStarted, peersEnded) / DELIVERIES;
    sum.receiver += receiverSpent(peersStarted, peersEnded) / DELIVERIES;
    cpu.set(kind, sum);
    return rate;
  };
  const bareLoop = () =>
    timed("bare", async () => {
      let next = 0;
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          while (next++ < DELIVERIES) {
            const answer = await fetch(url, {
              method: "POST",
              headers: { "content-type": "application/json", "webhook-id": "x" },
              body,
            });
            await answer.arrayBuffer();
          }
        }),
      );
    });

  const created = await createAccount("bench", "EdDSA");
  const account = created.account;
  const apiKey = created.apiKey.apiKey;
  await createEndpoint(account.id, { url, event_types: ["room.started"] });
  await prepareFloor();
  let recorded = 0;
  // Log rows marked succeeded so far: the worker's and the `rows` floor's, not the `batch` floor's.
  let succeeded = 0;
  /** A round's events, recorded before it is timed (their doorbells ring for no one). */
  const recordRound = async () => {
    for (let i = 0; i < DELIVERIES; i += 100) {
      await db.transaction(async (tx) => {
        for (let j = i; j < Math.min(i + 100, DELIVERIES); j++)
          await recordEvent(tx, account.id, "room.started", {
            room: `bench-${recorded + j}`,
            breakout_id: "",
            started_at: new Date().toISOString(),
          });
      });
    }
    recorded += DELIVERIES;
    // What the writes above leave to autovacuum is done now, not by a worker of it in the middle of the timed run.
    await db.execute(sql`vacuum (analyze) events, webhook_deliveries, webhook_due`);
  };
  /** One round of the worker: one worker sends the round's events, timed until every outcome is recorded. */
  const workerRun = async () => {
    await recordRound();
    const receivedBefore = await received();
    succeeded += DELIVERIES;
    let worker: ReturnType<typeof startWebhooksWorker> | undefined;
    const rate = await timed("worker", async () => {
      worker = startWebhooksWorker({ concurrency: CONCURRENCY, sweepIntervalMs: 60_000 });
      // Until the receiver has had them all it is asked, then the database, until every outcome is recorded: a batch's
      // outcomes commit with the delete of its due rows, so the due set is empty once the last has committed. (Counted
      // in the log instead, each look read every row logged so far, milliseconds of PostgreSQL's CPU in the timing.)
      while ((await received()) - receivedBefore < DELIVERIES) await Bun.sleep(20);
      for (;;) {
        const [row] = (await db.execute(sql`select exists (select from webhook_due) as due`)) as unknown as Array<{
          due: boolean;
        }>;
        if (!row!.due) break;
        await Bun.sleep(5);
      }
    });
    await worker!.stop();
    const [row] = (await db.execute(
      sql`select count(*)::int as n from webhook_deliveries where status = 'succeeded'`,
    )) as unknown as Array<{ n: number }>;
    if (row!.n !== succeeded) throw new Error(`${row!.n} deliveries succeeded of ${succeeded}`);
    return rate;
  };
  /** One round of a floor (test/bench/webhooks/durable-floor.ts) over the round's events. */
  const floorRun = async (outcomes: "rows" | "batch") => {
    await recordRound();
    const rate = await timed(outcomes, async () => {
      const sent = await runFloor(account.id, CONCURRENCY, outcomes);
      if (sent !== DELIVERIES) throw new Error(`the ${outcomes} floor sent ${sent} of ${DELIVERIES}`);
    });
    if (outcomes === "rows") succeeded += DELIVERIES;
    return rate;
  };
  // PostgreSQL's own speed, before the rounds and after: µs a `select 1` round trip and a one-row insert.
  await db.execute(sql`create table bench_insert (id bigserial primary key, body text not null)`);
  const postgresSpeed = async () => {
    const select: number[] = [];
    const insert: number[] = [];
    for (let i = 0; i < SAMPLES; i++) {
      let started = performance.now();
      await db.execute(sql`select 1`);
      select.push((performance.now() - started) * 1000);
      started = performance.now();
      await db.execute(sql`insert into bench_insert (body) values (${body})`);
      insert.push((performance.now() - started) * 1000);
    }
    return { select: percentile(select, 50), insert: percentile(insert, 50) };
  };
  const speeds = [await postgresSpeed()];
  // Each round runs the worker and then the two floors, each between two runs of the bare loop and its ratio taken
  // against their mean.
  const bareRates = [await bareLoop()];
  const rates = { worker: [] as number[], rows: [] as number[], batch: [] as number[] };
  const ratios = { worker: [] as number[], rows: [] as number[], batch: [] as number[] };
  for (let round = 0; round < ROUNDS; round++) {
    for (const kind of ["worker", "rows", "batch"] as const) {
      const rate = kind === "worker" ? await workerRun() : await floorRun(kind);
      bareRates.push(await bareLoop());
      rates[kind].push(rate);
      ratios[kind].push(rate / ((bareRates.at(-2)! + bareRates.at(-1)!) / 2));
    }
  }
  // The worker against the floor that writes as it does, round by round (each ran between the same bare runs).
  const againstFloor = rates.worker.map((rate, round) => rate / rates.rows[round]!);
  speeds.push(await postgresSpeed());

  // The outbox inside the writing transaction, one after another.
  const outbox: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    await db.transaction(async (tx) => {
      const started = performance.now();
      await recordEvent(tx, account.id, "room.started", {
        room: `latency-${i}`,
        breakout_id: "",
        started_at: new Date().toISOString(),
      });
      outbox.push(performance.now() - started);
    });
  }
  // The event_sync route that writes through it (its own insert, the outbox, the fold's doorbell).
  const app = createApp();
  const route: number[] = [];
  for (let i = 0; i < Math.min(SAMPLES, 1_000); i++) {
    const started = performance.now();
    const answer = await app.handle(
      new Request("http://parley.bench/api/v1/events/room/created", {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
        body: JSON.stringify({
          event_name: "muc-room-created",
          room_name: `route-${i}`,
          created_at: 1_900_000_000 + i,
        }),
      }),
    );
    if (answer.status !== 200) throw new Error(`the route answered ${answer.status}: ${await answer.text()}`);
    await answer.text();
    route.push(performance.now() - started);
  }

  // Concurrent writers: one account's writers wait for each other's commit; separate accounts do not.
  const WRITERS = 8;
  const others = await Promise.all(
    Array.from({ length: WRITERS }, (_, i) => createAccount(`bench-writer-${i}`, "EdDSA")),
  );
  const concurrentWriters = async (accountOf: (writer: number) => string) => {
    const latencies: number[] = [];
    const started = performance.now();
    await Promise.all(
      Array.from({ length: WRITERS }, async (_, writer) => {
        for (let i = 0; i < SAMPLES / WRITERS; i++) {
          await db.transaction(async (tx) => {
            const began = performance.now();
            await recordEvent(tx, accountOf(writer), "room.started", {
              room: `writer-${writer}-${i}`,
              breakout_id: "",
              started_at: new Date().toISOString(),
            });
            latencies.push(performance.now() - began);
          });
        }
      }),
    );
    return { rate: latencies.length / ((performance.now() - started) / 1000), latencies };
  };
  const shared = await concurrentWriters(() => account.id);
  const separate = await concurrentWriters((writer) => others[writer]!.account.id);

  console.log(`deliveries: ${DELIVERIES}, ${CONCURRENCY} in flight, database ${database.kind}`);
  console.log(
    `  bare fetch loop       ${median(bareRates).toFixed(0)} /s   (median of ${bareRates.length}: ` +
      `${bareRates.map((rate) => rate.toFixed(0)).join(", ")})`,
  );
  const line = (kind: "worker" | "rows" | "batch") =>
    `${median(rates[kind]).toFixed(0)} /s   ratio ${median(ratios[kind]).toFixed(2)} (median of ${ROUNDS} rounds, ` +
    `each against the bare loop's runs around it: ${ratios[kind].map((ratio) => ratio.toFixed(2)).join(", ")})`;
  console.log(`  webhooks worker       ${line("worker")}; target >= 0.5`);
  console.log(`  floor, a log row each ${line("rows")}`);
  console.log(`  floor, a row a batch  ${line("batch")}`);
  console.log(
    `  worker / floor        ${median(againstFloor).toFixed(2)} (median; rounds ` +
      `${againstFloor.map((ratio) => ratio.toFixed(2)).join(", ")}; ` +
      "against the floor that writes a log row a delivery, as the worker does)",
  );
  const micros = (values: number[]) => values.map((value) => value.toFixed(0)).join(" and ");
  console.log(
    `  PostgreSQL            select 1 ${micros(speeds.map((speed) => speed.select))} µs a round trip, ` +
      `a one-row insert ${micros(speeds.map((speed) => speed.insert))} µs ` +
      `(p50 of ${SAMPLES}, before the rounds and after)`,
  );
  // CPU µs a delivery, the mean of a kind's runs: this process; its peers (the receiver and PostgreSQL's backends
  // for this database); of those, the receiver; every process of the machine.
  const mean = (kind: Kind) => {
    const sum = cpu.get(kind)!;
    return {
      own: sum.own / sum.runs,
      peers: sum.peers / sum.runs,
      receiver: sum.receiver / sum.runs,
      machine: sum.machine / sum.runs,
    };
  };
  const bare = mean("bare");
  console.log(
    "  CPU µs a delivery     this process, PostgreSQL, the receiver; with its peers (and the rate CPU alone would " +
      "allow against the bare loop); every process of the machine",
  );
  for (const [kind, label] of [
    ["bare", "bare loop"],
    ["worker", "worker"],
    ["rows", "floor, a log row each"],
    ["batch", "floor, a row a batch"],
  ] as const) {
    const { own, peers, receiver, machine } = mean(kind);
    const withPeers = own + peers;
    console.log(
      `    ${label.padEnd(22)}${own.toFixed(1)}, ${(peers - receiver).toFixed(1)}, ${receiver.toFixed(1)}; ` +
        `${withPeers.toFixed(1)} (${((bare.own + bare.peers) / withPeers).toFixed(2)} ×); ${machine.toFixed(1)}`,
    );
  }
  console.log(`outbox (recordEvent in the transaction, ${SAMPLES} samples)`);
  console.log(`  p50 ${ms(percentile(outbox, 50))}   p99 ${ms(percentile(outbox, 99))} (target < 2 ms)`);
  console.log(`POST /api/v1/events/room/created (${route.length} samples)`);
  console.log(`  p50 ${ms(percentile(route, 50))}   p99 ${ms(percentile(route, 99))}`);
  console.log(`${WRITERS} concurrent writers (recordEvent and commit, ${SAMPLES} events)`);
  for (const [what, run] of [
    ["one account", shared],
    ["an account each", separate],
  ] as const) {
    console.log(
      `  ${what.padEnd(16)} ${run.rate.toFixed(0)} events/s   recordEvent p50 ` +
        `${ms(percentile(run.latencies, 50))}   p99 ${ms(percentile(run.latencies, 99))}`,
    );
  }
} finally {
  receiver.kill();
  await closeBench(services);
}
// The worker's blocking Redis connection can outlive its close by a while; the figures are printed.
process.exit(0);
