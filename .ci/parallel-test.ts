/**
 * Runs every test file of test/ in parallel, each file in its own `bun test` process.
 *
 *   bun .ci/parallel-test.ts [folder or file …]   (all of test/ by default)
 *
 * Most of a test's time is spent waiting on other processes (PostgreSQL, Redis, ffmpeg, sipp,
 * Chromium), so a fixed number of workers either leaves the cores idle (files that all wait) or
 * overloads them (files that all compute), and the timing-bound files (fault tests, real-time
 * media) miss their marks on an overloaded machine. So the runner keeps TEST_WORKERS files running
 * (default 2, one per core) and starts one more, up to TEST_MAX_WORKERS (default 3), only while the
 * machine's cores have been more than half idle over the last TEST_IDLE_WINDOW_MS (2 s): the whole
 * machine's idle time, so two runs (or any other work) on one machine hold each other back to the
 * base count. Each running file has a database of its own (a fresh copy of a migrated template,
 * all dropped at the end), and test/setup.ts gives each process its own Redis key prefix; tests
 * take free ports, so files never meet. A file in a process of its own also cannot leave a timer
 * or a child behind for the next file.
 *
 * Files marked to run alone (real-time media) run one by one after the rest.
 * The queue takes the slowest files first, by the durations of the previous run on this
 * checkout (node_modules/.cache), else by file size, so no long file starts last.
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
const maxWorkers = Math.max(workers, Number(process.env.TEST_MAX_WORKERS ?? 3));
const idleWindowMs = Number(process.env.TEST_IDLE_WINDOW_MS ?? 2000);
// Files end and start every two or three seconds on average, so the spacing of an extra start is
// shorter than the window: a start's first second (bun's own start) already shows in the idle time.
const startSpacingMs = idleWindowMs / 2;

function testFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return name === "node_modules" ? [] : testFiles(path);
    return name.endsWith(".test.ts") ? [path] : [];
  });
}

const previous: Record<string, number> = existsSync(TIMINGS) ? JSON.parse(readFileSync(TIMINGS, "utf8")) : {};
const weight = (file: string) => previous[file] ?? statSync(file).size;
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
const databases = Array.from({ length: maxWorkers }, (_, index) => `${base}_${process.pid}_${index}`);
const urlOf = (database: string) => Object.assign(new URL(BASE_URL), { pathname: `/${database}` }).toString();

// Migrated once per run; each file then gets a copy (CREATE DATABASE … TEMPLATE, a file copy), where
// test/setup.ts would otherwise wipe the schema and run every migration again in every file.
const template = `${base}_${process.pid}_template`;
await admin.unsafe(`create database ${template}`);
const migrated = Bun.spawnSync(["bun", "src/db/migrate.ts"], { env: { ...process.env, DATABASE_URL: urlOf(template) }, stderr: "pipe" });
if (migrated.exitCode !== 0) {
  console.error(`migrating the template database failed:\n${migrated.stderr.toString()}`);
  await admin.unsafe(`drop database if exists ${template} with (force)`);
  process.exit(1);
}

/** The worker's database afresh, as the migrations leave it; whatever the previous file left is gone. */
async function freshDatabase(database: string) {
  await admin.unsafe(`drop database if exists ${database} with (force)`);
  await admin.unsafe(`create database ${database} template ${template}`);
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

async function runFile(file: string, database: string) {
  const started = performance.now();
  await freshDatabase(database);
  const child = Bun.spawn(["bun", "test", "--timeout", "30000", file], {
    env: { ...process.env, TEST_DATABASE_URL: urlOf(database), TEST_DATABASE_FRESH: "true", TEST_S3_ENDPOINT: s3.endpoint },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, status] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  const output = stdout + stderr;
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
  console.log(`${mark} ${file}  ${result.pass} pass, ${result.fail} fail, ${result.skip} skip  (${seconds.toFixed(1)} s)`);
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

/**
 * Runs the queue with `workers` files at once, and one more (up to `maxWorkers`) whenever the
 * cores were more than half idle over the last window and no file started in its last half: a
 * file's start-up (bun, its migrations, the processes it drives) shows in the idle time before
 * another may join, so the runner climbs one file at a time and stops where the cores are busy.
 */
async function runQueue() {
  const free = [...databases];
  const running = new Set<Promise<void>>();
  let lastStart = 0;
  const start = (file: string) => {
    const database = free.pop()!;
    lastStart = performance.now();
    const run = runFile(file, database).finally(() => {
      free.push(database);
      running.delete(run);
    });
    running.add(run);
    peak = Math.max(peak, running.size);
  };
  const samples: { at: number; ticks: ReturnType<typeof cpuTicks> }[] = [];
  while (queue.length > 0 || running.size > 0) {
    while (queue.length > 0 && running.size < workers) start(queue.shift()!);
    const now = performance.now();
    samples.push({ at: now, ticks: cpuTicks() });
    while (samples.length > 1 && now - samples[0]!.at > idleWindowMs) samples.shift();
    const first = samples[0]!.ticks;
    const last = samples.at(-1)!.ticks;
    const idle = last.total > first.total ? (last.idle - first.idle) / (last.total - first.total) : 0;
    const quietLongEnough = now - samples[0]!.at >= idleWindowMs * 0.9 && now - lastStart > startSpacingMs;
    if (queue.length > 0 && running.size < maxWorkers && quietLongEnough && idle > 0.5) start(queue.shift()!);
    await Promise.race([...running, Bun.sleep(250)]);
  }
}

const started = performance.now();
try {
  await runQueue();
  for (const file of alone) await runFile(file, databases[0]!);
} finally {
  s3.stop();
  for (const name of [...databases, template]) await admin.unsafe(`drop database if exists ${name} with (force)`);
  await admin.end();
}
mkdirSync("node_modules/.cache", { recursive: true });
// Written aside and renamed over: node_modules may be hard-linked from another checkout.
writeFileSync(`${TIMINGS}.${process.pid}`, JSON.stringify({ ...previous, ...durations }));
renameSync(`${TIMINGS}.${process.pid}`, TIMINGS);

// Every file's wall time, slowest first, and their sum: where the run's time went.
const timed = Object.entries(durations).sort(([, a], [, b]) => b - a);
const column = (seconds: number | undefined) => (seconds === undefined ? "" : seconds.toFixed(1)).padStart(7);
console.log("\n   wall     cpu  (s)");
for (const [file, seconds] of timed) console.log(`${column(seconds)} ${column(cpu[file])}  ${file}`);
const sum = (values: number[]) => values.reduce((total, value) => total + value, 0);
const summed = sum(timed.map(([, seconds]) => seconds));
console.log(`${column(summed)} ${column(sum(Object.values(cpu)))}  summed over ${timed.length} files`);
console.log(`\n${workers} to ${maxWorkers} files at once (at most ${peak} ran), ${((performance.now() - started) / 1000).toFixed(1)} s in tests`);
if (failedFiles.length > 0) console.log(`${failures.join("\n\n")}\n\nfailed: ${failedFiles.join(", ")}`);
console.log(` ${totals.skip} skip`);
console.log(` ${totals.pass} pass`);
console.log(` ${totals.fail} fail`);
process.exit(totals.fail > 0 ? 1 : 0);
