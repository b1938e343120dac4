/**
 * Runs every test file of test/ in parallel, each file in its own `bun test` process.
 *
 *   bun .ci/parallel-test.ts [folder or file …]   (all of test/ by default)
 *
 * Most of a test's time is spent waiting on other processes (PostgreSQL, Redis, ffmpeg, sipp,
 * Chromium), so a fixed number of workers either leaves the cores idle (files that all wait) or
 * overloads them (files that all compute), and the timing-bound files (fault tests, real-time
 * media) miss their marks on an overloaded machine. So the runner keeps TEST_WORKERS files running
 * (default 2, one per core) and starts one more, up to TEST_MAX_WORKERS (default 2: a third file
 * made the fault tests miss their marks on a 2-core machine, docs/testing.md), only while the
 * machine's cores have been more than half idle over the last TEST_IDLE_WINDOW_MS (2 s): the whole
 * machine's idle time, so two runs (or any other work) on one machine hold each other back to the
 * base count. Beside those, up to TEST_WAITING_WORKERS files (default 2) that mostly wait run in
 * lanes of their own while a quarter of the cores is idle: a file that kept under TEST_WAITING_SHARE
 * of a core busy (0.35; its process and the children it waited for) in the quiet run kept in
 * .ci/test-times.json adds little to the cores' load, yet held one of the two lanes for its whole
 * wait (the fault tests, the live streams). Each running file has a database of its own (a fresh copy of a migrated template,
 * all dropped at the end), and test/setup.ts gives each process its own Redis key prefix; tests
 * take free ports, so files never meet. A file in a process of its own also cannot leave a timer
 * or a child behind for the next file.
 *
 * Files marked to run alone (real-time media) run after the rest, in two lanes: one by one those that
 * compute (the kept quiet run's CPU at TEST_WAITING_SHARE of their wall or more), and beside them, one
 * by one, those that mostly wait, whose few packets a second cannot crowd the other's cores.
 * The queue takes the slowest files first, by the wall and CPU times of the previous run on this
 * checkout (node_modules/.cache), else those kept in .ci/test-times.json, else by file size,
 * so no long file starts last.
 * Prints each file as it ends, the whole output of a file that failed, and at the end what the
 * failed files said once more and the summed "N pass" / "N fail" lines that .ci/test counts.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import postgres from "postgres";
import { startS3rver } from "../test/support/s3rver";

const TIMINGS = "node_modules/.cache/parley-test-times.json";
const BASE_URL = process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const workers = Math.max(1, Number(process.env.TEST_WORKERS ?? 2));
const maxWorkers = Math.max(workers, Number(process.env.TEST_MAX_WORKERS ?? 2));
const idleWindowMs = Number(process.env.TEST_IDLE_WINDOW_MS ?? 2000);
const waitingWorkers = Math.max(0, Number(process.env.TEST_WAITING_WORKERS ?? 2));
const waitingShare = Number(process.env.TEST_WAITING_SHARE ?? 0.35);
// Files end and start every two or three seconds on average, so the spacing of an extra start is
// shorter than the window: a start's first second (bun's own start) already shows in the idle time.
const startSpacingMs = idleWindowMs / 2;
/**
 * A waiting lane opens only while the cores were this idle over the window: half a core, more than a
 * waiting file's own share. A machine that two runs (or any other work) keep busy leaves them shut,
 * so the timing-bound files among the waiting ones never start on cores that are already full.
 */
const WAITING_LANE_IDLE = 0.25;

function testFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return name === "node_modules" ? [] : testFiles(path);
    return name.endsWith(".test.ts") ? [path] : [];
  });
}

// A fresh clone has no timings of its own yet: it orders by the ones kept with the runner (a quiet run's).
const KEPT_TIMINGS = ".ci/test-times.json";
/** A file's wall and CPU seconds in a run; a cache written before CPU was kept holds the wall alone. */
type Timing = { wall: number; cpu?: number };
const timingsIn = (path: string): Record<string, Timing | number> =>
  existsSync(path) ? JSON.parse(readFileSync(path, "utf8")) : {};
const wallOf = (timing: Timing | number) => (typeof timing === "number" ? timing : timing.wall);
const kept = timingsIn(KEPT_TIMINGS);
const previous: Record<string, Timing | number> = { ...kept, ...timingsIn(TIMINGS) };
const weight = (file: string) => (previous[file] === undefined ? statSync(file).size : wallOf(previous[file]));
/**
 * Whether the file mostly waits, by the quiet run kept with the runner: a busy machine stretches a
 * file's wall time and not its CPU, so the last local run would make files that compute look idle.
 * A file not in it is taken to compute.
 */
const waits = (file: string) => {
  const timing = kept[file];
  return typeof timing === "object" && timing.cpu !== undefined && timing.cpu < timing.wall * waitingShare;
};
// A file that measures real-time media (RTP pacing, DTMF timing) says so with this line and
// runs after the others, with the machine to itself.
const ALONE = "// parallel-test: alone";
// Folders or files named on the command line, else the whole of test/.
const roots = process.argv.length > 2 ? process.argv.slice(2) : ["test"];
const files = roots.flatMap((root) => (statSync(root).isDirectory() ? testFiles(root) : [root])).sort((a, b) => weight(b) - weight(a));
const alone = files.filter((file) => readFileSync(file, "utf8").includes(ALONE));
const queue = files.filter((file) => !alone.includes(file));

// One database per worker and per run, named after the base database, so two runs on one machine
// (or two checkouts with bases of their own) never share one.
const admin = postgres(BASE_URL, { max: 1, onnotice: () => {} });
const base = new URL(BASE_URL).pathname.slice(1) || "test";
const databases = Array.from({ length: maxWorkers + waitingWorkers }, (_, index) => `${base}_${process.pid}_${index}`);
const urlOf = (database: string) => Object.assign(new URL(BASE_URL), { pathname: `/${database}` }).toString();

// Migrated once per run; each file then gets a copy (CREATE DATABASE … TEMPLATE, a file copy), where
// test/setup.ts would otherwise wipe the schema and run every migration again in every file.
const template = `${base}_${process.pid}_template`;
/*
 * The tests' databases commit without waiting for the WAL's flush: a commit on this disk waits
 * 3-4 ms for it, 0.4-0.6 ms without, and a file commits thousands of times, one after another.
 * Only a crash of the server could lose those commits, and no test crashes the shared server:
 * the fault tests that kill PostgreSQL start their own (test/support/private-postgres.ts).
 * A database's settings are not copied with it, so each copy is given the same.
 */
const UNSYNCED = "set synchronous_commit = off";
await admin.unsafe(`create database ${template}`);
await admin.unsafe(`alter database ${template} ${UNSYNCED}`);
const migrated = Bun.spawnSync([process.execPath, "src/db/migrate.ts"], { env: { ...process.env, DATABASE_URL: urlOf(template) }, stderr: "pipe" });
if (migrated.exitCode !== 0) {
  console.error(`migrating the template database failed:\n${migrated.stderr.toString()}`);
  await admin.unsafe(`drop database if exists ${template} with (force)`);
  process.exit(1);
}

/*
 * What a database's schema is, as one digest: relations, columns, constraints, triggers, functions,
 * types, schemas, its own settings and the migrations applied. A file that left it as the template
 * has it gets it back emptied, else copied anew.
 */
const SHAPE = `
  select md5(string_agg(item, ',' order by item)) as shape from (
    select 'c:' || n.nspname || '.' || c.relname || ':' || c.relkind::text || ':' || c.relrowsecurity || ':'
        || coalesce(array_to_string(c.reloptions, ';'), '') as item
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname not in ('pg_catalog', 'information_schema') and n.nspname not like 'pg\\_%'
    union all select 'a:' || a.attrelid::regclass || '.' || a.attname || ':' || a.atttypid || ':' || a.attnotnull
        || ':' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
      from pg_attribute a join pg_class c on c.oid = a.attrelid join pg_namespace n on n.oid = c.relnamespace
      left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
      where n.nspname in ('public', 'drizzle') and a.attnum > 0 and not a.attisdropped
    union all select 'k:' || conrelid::regclass || '.' || conname || ':' || pg_get_constraintdef(c.oid)
      from pg_constraint c join pg_namespace n on n.oid = c.connamespace where n.nspname in ('public', 'drizzle')
    union all select 't:' || tgrelid::regclass || '.' || tgname || ':' || tgenabled::text from pg_trigger where not tgisinternal
    union all select 'p:' || n.nspname || '.' || p.proname || ':' || md5(p.prosrc)
      from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname not in ('pg_catalog', 'information_schema')
    union all select 'y:' || n.nspname || '.' || t.typname || ':' || coalesce((
        select string_agg(enumlabel, ';' order by enumsortorder) from pg_enum where enumtypid = t.oid), '')
      from pg_type t join pg_namespace n on n.oid = t.typnamespace where n.nspname in ('public', 'drizzle')
    union all select 'n:' || nspname from pg_namespace
      where nspname not like 'pg\\_temp\\_%' and nspname not like 'pg\\_toast\\_temp\\_%'
    union all select 'e:' || extname || ':' || extversion from pg_extension
    union all select 'd:' || coalesce(array_to_string(setconfig, ';'), '') from pg_db_role_setting
      where setdatabase = (select oid from pg_database where datname = current_database())
    union all select 'm:' || count(*) from drizzle.__drizzle_migrations
  ) items`;

const slots = new Map<string, ReturnType<typeof postgres>>();
const slotOf = (database: string) => {
  let sql = slots.get(database);
  if (!sql) slots.set(database, (sql = postgres(urlOf(database), { max: 1, onnotice: () => {} })));
  return sql;
};
const shapeOf = async (sql: ReturnType<typeof postgres>) => (await sql.unsafe(SHAPE))[0]!.shape as string;
const templateShape = await (async () => {
  const sql = postgres(urlOf(template), { max: 1, onnotice: () => {} });
  try {
    return await shapeOf(sql);
  } finally {
    await sql.end();
  }
})();
const created = new Set<string>();
const reused = { emptied: 0, copied: 0 };

/*
 * The worker's database afresh, as the migrations leave it; whatever the previous file left is gone.
 * Copying the template costs PostgreSQL about half a second of CPU and more of the disk (every page
 * of the catalogue goes through the WAL, then the drop), as much as a small test file: a database
 * whose schema is still the template's is emptied instead, its sequences restarted.
 */
async function freshDatabase(database: string) {
  if (created.has(database)) {
    const sql = slotOf(database);
    try {
      // Whatever the last file left connected (a process it started that lingers) lets go first.
      await sql.unsafe(`select pg_terminate_backend(pid) from pg_stat_activity
        where datname = current_database() and pid <> pg_backend_pid()`);
      if ((await shapeOf(sql)) === templateShape) {
        await sql.begin(async (tx) => {
          await tx.unsafe("set local lock_timeout = '5s'");
          const tables = await tx.unsafe(`select format('%I.%I', schemaname, tablename) as name from pg_tables
            where schemaname = 'public'`);
          if (tables.length > 0) {
            // Only the tables holding rows: truncating an empty one still makes and syncs new files.
            const filled = await tx.unsafe(
              tables.map(({ name }) => `select '${name}' as name where exists (select from ${name})`).join(" union all "),
            );
            if (filled.length > 0) await tx.unsafe(`truncate ${filled.map(({ name }) => name).join(", ")} cascade`);
          }
          const sequences = await tx.unsafe(`select format('%I.%I', schemaname, sequencename) as name
            from pg_sequences where schemaname = 'public' and last_value is not null`);
          for (const { name } of sequences) await tx.unsafe(`alter sequence ${name} restart`);
        });
        reused.emptied++;
        return;
      }
    } catch (error) {
      console.error(`emptying ${database} failed, copying the template anew: ${(error as Error).message}`);
    }
  }
  await admin.unsafe(`drop database if exists ${database} with (force)`);
  await admin.unsafe(`create database ${database} template ${template}`);
  await admin.unsafe(`alter database ${database} ${UNSYNCED}`);
  created.add(database);
  reused.copied++;
}

// One S3 server for the run; each file makes a bucket of its own there (test/setup.ts).
const s3 = await startS3rver();

const totals = { pass: 0, fail: 0, skip: 0 };
const failedFiles: string[] = [];
/** What each failed file printed, but its passing tests' lines: shown again at the end, where a log's tail shows it. */
const failures: string[] = [];
const durations: Record<string, number> = {};
/** CPU seconds of each file's process and the children it waited for: far below the wall time means waiting. */
const cpu: Record<string, number> = {};

function count(output: string, word: string): number {
  const lines = output.match(new RegExp(`^ *(\\d+) ${word}$`, "gm")) ?? [];
  return lines.reduce((sum, line) => sum + Number(line.trim().split(" ")[0]), 0);
}

/** How long a file's output may stay open after its process exited. */
const OUTPUT_AFTER_EXIT_MS = 30_000;

/** A stream's text to its end, or to when `cutOff` settles; and whether it ended. */
async function readUntil(stream: ReadableStream<Uint8Array>, cutOff: Promise<unknown>) {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  const stop = cutOff.then(() => undefined);
  let text = "";
  for (;;) {
    const next = await Promise.race([reader.read(), stop]);
    if (next === undefined) {
      reader.cancel().catch(() => {});
      return { text, ended: false };
    }
    if (next.done) return { text, ended: true };
    text += decoder.decode(next.value, { stream: true });
  }
}

async function runFile(file: string, database: string) {
  const started = performance.now();
  await freshDatabase(database);
  const child = Bun.spawn([process.execPath, "test", "--timeout", "30000", file], {
    env: { ...process.env, TEST_DATABASE_URL: urlOf(database), TEST_DATABASE_FRESH: "true", TEST_S3_ENDPOINT: s3.endpoint },
    stdout: "pipe",
    stderr: "pipe",
  });
  // A process the file started and left running keeps its output open after it exits: once the file's own process
  // is gone, its output gets a while to end, then the file fails saying so, where it would have held the run forever.
  const cutOff = child.exited.then(() => Bun.sleep(OUTPUT_AFTER_EXIT_MS));
  const [stdout, stderr, status] = await Promise.all([readUntil(child.stdout, cutOff), readUntil(child.stderr, cutOff), child.exited]);
  let output = stdout.text + stderr.text;
  if (!stdout.ended || !stderr.ended) {
    output += `\nparallel-test: the file's process exited, but its output was still held open ${OUTPUT_AFTER_EXIT_MS / 1000} s later: a process it started is left running\n 1 fail\n`;
  }
  const seconds = (performance.now() - started) / 1000;
  durations[file] = seconds;
  const used = child.resourceUsage()?.cpuTime.total;
  if (used !== undefined) cpu[file] = Number(used) / 1e6;
  const result = { pass: count(output, "pass"), fail: count(output, "fail"), skip: count(output, "skip") };
  // A file that crashed before bun counted anything is still a failure.
  if (status !== 0 && result.fail === 0) result.fail = 1;
  totals.pass += result.pass;
  totals.fail += result.fail;
  totals.skip += result.skip;
  const mark = result.fail > 0 ? "✗" : "✓";
  // When in the run it ended, too: where the run's tail went.
  const at = ((performance.now() - runStarted) / 1000).toFixed(0);
  console.log(
    `${mark} ${file}  ${result.pass} pass, ${result.fail} fail, ${result.skip} skip  (${seconds.toFixed(1)} s, ended at ${at} s)`,
  );
  // A file that skips says why in a line of its own ("… skipped: …"): shown, so no skip is silent.
  if (result.fail === 0 && result.skip > 0) for (const line of output.split("\n").filter((line) => / skipped: /.test(line))) console.log(`    ${line}`);
  if (result.fail > 0) {
    failedFiles.push(file);
    console.log(output);
    const told = output.split("\n").filter((line) => line.trim() !== "" && !line.startsWith("(pass)"));
    failures.push(`${file}:\n${told.slice(-60).join("\n")}`);
  }
}

/** The machine's idle and total CPU ticks so far (all cores), from /proc/stat's first line. */
function cpuTicks(): { idle: number; total: number } {
  const fields = readFileSync("/proc/stat", "utf8").split("\n", 1)[0]!.trim().split(/\s+/).slice(1).map(Number);
  // idle + iowait: a core waiting on the disk could run a test meanwhile.
  return { idle: (fields[3] ?? 0) + (fields[4] ?? 0), total: fields.reduce((sum, value) => sum + value, 0) };
}

let peak = 0;
/** How many files ran in a waiting lane. */
let inWaitingLaneCount = 0;

/**
 * Runs the queue with `workers` files at once, and one more (up to `maxWorkers`) whenever the
 * cores were more than half idle over the last window and no file started in its last half: a
 * file's start-up (bun, its migrations, the processes it drives) shows in the idle time before
 * another may join, so the runner climbs one file at a time and stops where the cores are busy.
 * The waiting lanes take the files that mostly wait, slowest first, on the same conditions with a
 * lower idle share; what is left of them when the queue holds nothing else goes through the other
 * lanes as any file does.
 */
async function runQueue() {
  const free = [...databases];
  /** Each running file, and whether it runs in a waiting lane. */
  const running = new Map<Promise<void>, boolean>();
  const inWaitingLanes = () => [...running.values()].filter(Boolean).length;
  let lastStart = 0;
  const start = (file: string, waitingLane: boolean) => {
    const database = free.pop()!;
    lastStart = performance.now();
    const run = runFile(file, database).finally(() => {
      free.push(database);
      running.delete(run);
    });
    running.set(run, waitingLane);
    if (waitingLane) inWaitingLaneCount++;
    peak = Math.max(peak, running.size);
  };
  const samples: { at: number; ticks: ReturnType<typeof cpuTicks> }[] = [];
  while (queue.length > 0 || running.size > 0) {
    // With waiting lanes, the other lanes take the files that compute first and leave the waiting ones to them.
    while (queue.length > 0 && running.size - inWaitingLanes() < workers) {
      const computes = waitingWorkers > 0 ? queue.findIndex((file) => !waits(file)) : 0;
      start(queue.splice(Math.max(0, computes), 1)[0]!, false);
    }
    const now = performance.now();
    samples.push({ at: now, ticks: cpuTicks() });
    // The oldest sample kept is the newest one at least a window old: the window is whole, so the
    // check below can hold (trimmed to under a window, it was 1.75 s old and never 0.9 of 2 s).
    while (samples.length > 1 && now - samples[1]!.at >= idleWindowMs) samples.shift();
    const first = samples[0]!.ticks;
    const last = samples.at(-1)!.ticks;
    const idle = last.total > first.total ? (last.idle - first.idle) / (last.total - first.total) : 0;
    const quietLongEnough = now - samples[0]!.at >= idleWindowMs * 0.9 && now - lastStart > startSpacingMs;
    const waiting = queue.findIndex(waits);
    if (waiting >= 0 && inWaitingLanes() < waitingWorkers && quietLongEnough && idle > WAITING_LANE_IDLE) {
      start(queue.splice(waiting, 1)[0]!, true);
    } else if (queue.length > 0 && running.size - inWaitingLanes() < maxWorkers && quietLongEnough && idle > 0.5) {
      start(queue.shift()!, false);
    }
    await Promise.race([...running.keys(), Bun.sleep(250)]);
  }
}

const runStarted = performance.now();
const ticksAtStart = cpuTicks();
try {
  await runQueue();
  const lane = async (files: string[], database: string) => {
    for (const file of files) await runFile(file, database);
  };
  await Promise.all([
    lane(alone.filter((file) => !waits(file)), databases[0]!),
    lane(alone.filter(waits), databases[1]!),
  ]);
} finally {
  s3.stop();
  for (const sql of slots.values()) await sql.end({ timeout: 1 });
  for (const name of [...databases, template]) await admin.unsafe(`drop database if exists ${name} with (force)`);
  await admin.end();
}
mkdirSync("node_modules/.cache", { recursive: true });
// Written aside and renamed over: node_modules may be hard-linked from another checkout.
const timings = Object.fromEntries(Object.entries(durations).map(([file, wall]) => [file, { wall, cpu: cpu[file] }]));
writeFileSync(`${TIMINGS}.${process.pid}`, JSON.stringify({ ...previous, ...timings }));
renameSync(`${TIMINGS}.${process.pid}`, TIMINGS);

// Every file's wall time, slowest first, and their sum: where the run's time went.
const timed = Object.entries(durations).sort(([, a], [, b]) => b - a);
const column = (seconds: number | undefined) => (seconds === undefined ? "" : seconds.toFixed(1)).padStart(7);
console.log("\n   wall     cpu  (s)");
for (const [file, seconds] of timed) console.log(`${column(seconds)} ${column(cpu[file])}  ${file}`);
const sum = (values: number[]) => values.reduce((total, value) => total + value, 0);
const summed = sum(timed.map(([, seconds]) => seconds));
console.log(`${column(summed)} ${column(sum(Object.values(cpu)))}  summed over ${timed.length} files`);
// How busy the cores were over the run (every process's work, PostgreSQL's and the browsers' too): near 100 % the
// run is bound by CPU, and only less work makes it shorter.
const ticksAtEnd = cpuTicks();
const busy = 1 - (ticksAtEnd.idle - ticksAtStart.idle) / (ticksAtEnd.total - ticksAtStart.total);
console.log(`\n${workers} to ${maxWorkers} files at once and ${waitingWorkers} that wait (at most ${peak} ran, ${inWaitingLaneCount} files in waiting lanes), ${((performance.now() - runStarted) / 1000).toFixed(1)} s in tests, the cores ${(busy * 100).toFixed(0)} % busy; databases: ${reused.emptied} emptied, ${reused.copied} copied`);
if (failedFiles.length > 0) console.log(`${failures.join("\n\n")}\n\nfailed: ${failedFiles.join(", ")}`);
console.log(` ${totals.skip} skip`);
console.log(` ${totals.pass} pass`);
console.log(` ${totals.fail} fail`);
process.exit(totals.fail > 0 ? 1 : 0);
