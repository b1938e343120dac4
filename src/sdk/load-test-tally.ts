/**
 * How `parley load-test` times its parts: a part's tally of samples and errors (and the result
 * it becomes), the open-loop pacing every part runs at, and the timed HTTP request. Apart from
 * the parts so that each of them counts the same way.
 */
export interface PartResult {
  status: "ran" | "skipped" | "failed";
  reason?: string;
  operations: number;
  errors: number;
  /** Operations answered per second of the run. */
  throughput: number;
  p50_ms: number | null;
  p95_ms: number | null;
  p99_ms: number | null;
  /** The first error seen, to say what went wrong. */
  first_error?: string;
}

export class Tally {
  readonly samples: number[] = [];
  errors = 0;
  firstError: string | undefined;
  status: PartResult["status"] = "ran";
  reason: string | undefined;

  ok(startedAt: number): void {
    this.samples.push(performance.now() - startedAt);
  }

  fail(why: string): void {
    this.errors++;
    this.firstError ??= why;
  }

  skip(reason: string, status: "skipped" | "failed" = "skipped"): void {
    this.status = status;
    this.reason = reason;
  }

  result(seconds: number): PartResult {
    const sorted = [...this.samples].sort((a, b) => a - b);
    const at = (p: number) =>
      sorted.length === 0
        ? null
        : Math.round(sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]! * 1000) / 1000;
    return {
      status: this.status,
      ...(this.reason !== undefined && { reason: this.reason }),
      operations: sorted.length,
      errors: this.errors,
      throughput: Math.round((sorted.length / seconds) * 10) / 10,
      p50_ms: at(50),
      p95_ms: at(95),
      p99_ms: at(99),
      ...(this.firstError !== undefined && { first_error: this.firstError }),
    };
  }
}

export const message = (error: unknown) => (error instanceof Error ? error.message : String(error));
export const sleep = (ms: number) => new Promise<void>((done) => setTimeout(done, ms));

/** Starts `operation` `rate` times a second until `running()` is false; resolves once all have ended. */
export async function paced(rate: number, running: () => boolean, operation: () => Promise<void>): Promise<void> {
  if (rate <= 0) return;
  const pending = new Set<Promise<void>>();
  const interval = 1000 / rate;
  let next = performance.now();
  while (running()) {
    const started = operation().catch(() => {});
    pending.add(started);
    void started.then(() => pending.delete(started));
    next += interval;
    await sleep(Math.max(0, next - performance.now()));
  }
  await Promise.all(pending);
}

/** An HTTP request timed by the tally: 2xx counts, anything else is an error. */
export async function timed(tally: Tally, request: () => Promise<Response>): Promise<Response | undefined> {
  const startedAt = performance.now();
  try {
    const answer = await request();
    if (answer.ok) {
      tally.ok(startedAt);
      return answer;
    }
    tally.fail(`${answer.status} ${(await answer.text()).slice(0, 200)}`);
  } catch (error) {
    tally.fail(message(error));
  }
  return undefined;
}
