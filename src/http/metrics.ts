/**
 * Prometheus text metrics. Each API process counts its own requests and publishes a
 * snapshot to Redis every few seconds; /metrics merges the live snapshots, so a scrape
 * that lands on any process sees the whole pool. While Redis is away a scrape shows this
 * process alone, and the queue depths are left out.
 */
import { queueDepths } from "../queue/queues";
import { promptRedis, redisKey, withinRedis } from "../queue/connection";

/** Upper bounds of the latency buckets, in seconds. */
const BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
const SNAPSHOT_EVERY_MS = 5_000;
const SNAPSHOT_STALE_MS = 30_000;

interface RouteStats {
  counts: Record<string, number>;
  buckets: number[];
  sum: number;
  total: number;
}

/** What a process holds open of one capped resource now (src/modules/limits/held.ts), and its caps. */
export interface HeldGauge {
  resource: string;
  inUse: number;
  /** Each cap by whom it counts: `process`, or a caller (`address`, `API key`, …), the most one of them may hold. */
  caps: Record<string, number>;
  /** Refusals so far, by the cap that refused. */
  refused: Record<string, number>;
}

interface Snapshot {
  at: number;
  routes: Record<string, RouteStats>;
  /** Absent in a snapshot of a process from before held resources were reported. */
  held?: HeldGauge[];
}

const routes: Record<string, RouteStats> = {};
const heldSources: Array<() => HeldGauge> = [];

/** Adds a capped resource to every snapshot of this process. */
export function reportHeld(source: () => HeldGauge): void {
  heldSources.push(source);
}

const heldNow = () => heldSources.map((source) => source());

/** Lines a feature renders itself at scrape time, read from where its truth lives (the database, Redis). */
type MetricLines = () => Promise<string[]>;
const lineSources: MetricLines[] = [];

/** Adds a feature's own metrics to /metrics; one that fails is left out of that scrape. */
export function reportMetricLines(source: MetricLines): void {
  lineSources.push(source);
}

function statsFor(table: Record<string, RouteStats>, key: string): RouteStats {
  let stats = table[key];
  if (!stats) {
    stats = { counts: {}, buckets: BUCKETS.map(() => 0), sum: 0, total: 0 };
    table[key] = stats;
  }
  return stats;
}

export function observeRequest(method: string, route: string, status: number, seconds: number): void {
  const stats = statsFor(routes, `${method} ${route}`);
  stats.counts[status] = (stats.counts[status] ?? 0) + 1;
  stats.sum += seconds;
  stats.total += 1;
  for (let i = 0; i < BUCKETS.length; i++) if (seconds <= BUCKETS[i]!) stats.buckets[i]! += 1;
}

const snapshotKey = () => redisKey("metrics");

async function publishSnapshot(): Promise<void> {
  const snapshot: Snapshot = { at: Date.now(), routes, held: heldNow() };
  await withinRedis(promptRedis(), "publishing metrics", () =>
    promptRedis().hset(snapshotKey(), String(process.pid), JSON.stringify(snapshot)),
  );
}

let timer: ReturnType<typeof setInterval> | undefined;

export function startMetricsPublisher(): void {
  timer ??= setInterval(() => publishSnapshot().catch(() => {}), SNAPSHOT_EVERY_MS);
  timer.unref?.();
}

export function stopMetricsPublisher(): void {
  if (timer) clearInterval(timer);
  timer = undefined;
}

function merge(into: Record<string, RouteStats>, from: Record<string, RouteStats>): void {
  for (const [key, stats] of Object.entries(from)) {
    const target = statsFor(into, key);
    for (const [status, count] of Object.entries(stats.counts))
      target.counts[status] = (target.counts[status] ?? 0) + count;
    stats.buckets.forEach((count, i) => {
      target.buckets[i]! += count;
    });
    target.sum += stats.sum;
    target.total += stats.total;
  }
}

/** The held resources of each process: in use, the caps, and the refusals by cap. */
function heldLines(byProcess: Record<string, HeldGauge[]>): string[] {
  const inUse = [
    "# HELP parley_held What an API process holds open now: LL-HLS waits, event streams, sockets, topics, feeds.",
    "# TYPE parley_held gauge",
  ];
  const caps = [
    "# HELP parley_held_cap The most an API process may hold (per=process), or one caller in it (per=<caller>).",
    "# TYPE parley_held_cap gauge",
  ];
  const refused = [
    "# HELP parley_held_refused_total Requests refused at a cap (429 a caller's, 503 the process's).",
    "# TYPE parley_held_refused_total counter",
  ];
  for (const [pid, gauges] of Object.entries(byProcess)) {
    for (const gauge of gauges) {
      const labels = `resource="${label(gauge.resource)}",pid="${pid}"`;
      inUse.push(`parley_held{${labels}} ${gauge.inUse}`);
      for (const [per, cap] of Object.entries(gauge.caps))
        caps.push(`parley_held_cap{${labels},per="${label(per)}"} ${cap}`);
      for (const [cap, count] of Object.entries(gauge.refused))
        refused.push(`parley_held_refused_total{${labels},cap="${label(cap)}"} ${count}`);
    }
  }
  return [...inUse, ...caps, ...refused];
}

export async function renderMetrics(): Promise<string> {
  const merged: Record<string, RouteStats> = {};
  // Caps are per process, so what each holds is shown apart, by pid.
  const held: Record<string, HeldGauge[]> = {};
  try {
    await publishSnapshot();
    const stored = await withinRedis(promptRedis(), "reading metrics", () => promptRedis().hgetall(snapshotKey()));
    const now = Date.now();
    const stale: string[] = [];
    for (const [pid, raw] of Object.entries(stored)) {
      const snapshot = JSON.parse(raw) as Snapshot;
      if (now - snapshot.at > SNAPSHOT_STALE_MS) stale.push(pid);
      else {
        merge(merged, snapshot.routes);
        held[pid] = snapshot.held ?? [];
      }
    }
    if (stale.length > 0)
      await withinRedis(promptRedis(), "dropping stale metrics", () =>
        promptRedis().hdel(snapshotKey(), ...stale),
      ).catch(() => 0);
  } catch {
    // Without Redis the other processes' snapshots are out of
    // reach (nothing was merged yet): this process's own counts.
    merge(merged, routes);
    held[String(process.pid)] = heldNow();
  }
  const lines = [
    "# HELP parley_http_requests_total HTTP requests answered, by route and status.",
    "# TYPE parley_http_requests_total counter",
  ];
  for (const [key, stats] of Object.entries(merged)) {
    const [method, route] = key.split(" ", 2) as [string, string];
    for (const [status, count] of Object.entries(stats.counts)) {
      lines.push(`parley_http_requests_total{method="${method}",route="${label(route)}",status="${status}"} ${count}`);
    }
  }
  lines.push(
    "# HELP parley_http_request_duration_seconds Time to answer an HTTP request.",
    "# TYPE parley_http_request_duration_seconds histogram",
  );
  for (const [key, stats] of Object.entries(merged)) {
    const [method, route] = key.split(" ", 2) as [string, string];
    const labels = `method="${method}",route="${label(route)}"`;
    BUCKETS.forEach((bound, i) => {
      lines.push(`parley_http_request_duration_seconds_bucket{${labels},le="${bound}"} ${stats.buckets[i]}`);
    });
    lines.push(`parley_http_request_duration_seconds_bucket{${labels},le="+Inf"} ${stats.total}`);
    lines.push(`parley_http_request_duration_seconds_sum{${labels}} ${stats.sum}`);
    lines.push(`parley_http_request_duration_seconds_count{${labels}} ${stats.total}`);
  }
  lines.push(...heldLines(held));
  lines.push("# HELP parley_queue_jobs Jobs in each BullMQ queue, by state.", "# TYPE parley_queue_jobs gauge");
  for (const [queue, counts] of Object.entries(await queueDepths())) {
    for (const [state, count] of Object.entries(counts)) {
      lines.push(`parley_queue_jobs{queue="${queue}",state="${state}"} ${count}`);
    }
  }
  // One feature's store away leaves the rest of the scrape whole.
  for (const source of lineSources) lines.push(...(await source().catch(() => [])));
  return `${lines.join("\n")}\n`;
}

/** Prometheus label value escaping. */
export const label = (value: string) => value.replace(/\\/g, "\\\\").replace(/"/g, '\\"');
