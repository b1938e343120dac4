/**
 * A process whose stop hangs still exits: a cdr worker's fold is held inside its transaction
 * by a lock taken from outside, so closing the worker would wait for ever; SIGTERM must end
 * the process once the grace period and its margin are over, and the events it held must
 * still be folded by another worker.
 */
import { expect, test } from "bun:test";
import postgres from "postgres";
import { startCdrWorker } from "../workers/cdr";
import { newAccount } from "./helpers";
import { at, deliver, occupantLeft } from "./support/event-sync";
import { unfoldedCount } from "./support/stored-events";
import { until } from "./support/wait";

const GRACE_MS = 1_000;
const entry = new URL("../src/index.ts", import.meta.url).pathname;

test("SIGTERM ends a cdr process whose fold never ends, after grace and margin; another worker folds it", async () => {
  const account = await newAccount();
  // The fold takes this lock for the room inside its transaction (as test/workers/cdr.test.ts does).
  const blocker = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
  await blocker`select pg_advisory_lock(hashtextextended(${`${account.accountId}|stuck-room`}, 0))`;
  // Its sweep finds the event whether or not the child was listening when it was rung.
  const child = Bun.spawn([process.execPath, entry, "--role=cdr"], {
    env: {
      ...process.env,
      LOG_LEVEL: "silent",
      SHUTDOWN_GRACE_MS: String(GRACE_MS),
      USAGE_SWEEP_INTERVAL_MS: "200",
      USAGE_SWEEP_MIN_AGE_MS: "0",
    },
    stdout: "ignore",
    stderr: "inherit",
  });
  try {
    await deliver(
      account.apiKey,
      occupantLeft(
        "stuck-room",
        { id: "kim", occupant_jid: "k@meet.example.com/K" },
        at("10:00:00"),
        at("10:30:00"),
        0,
      ),
    );
    const waiting = await until(
      async () =>
        (
          await blocker`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like '%pg_advisory_xact_lock%'`
        )[0]!.n,
      (n) => n > 0,
      15_000,
    );
    expect(waiting).toBeGreaterThan(0);

    const signalled = Date.now();
    child.kill("SIGTERM");
    const code = await Promise.race([child.exited, Bun.sleep(15_000).then(() => "still running")]);
    expect(code).toBe(1);
    // Grace (1 s) and the 5 s margin, not for ever.
    expect(Date.now() - signalled).toBeGreaterThanOrEqual(GRACE_MS);
    expect(Date.now() - signalled).toBeLessThan(GRACE_MS + 5_000 + 3_000);
  } finally {
    child.kill("SIGKILL");
    await blocker`select pg_advisory_unlock_all()`;
    await blocker.end();
  }

  // The events the dead process held are not lost: its transaction died with it, and another worker's sweep folds them.
  const taker = startCdrWorker({ concurrency: 1, sweepIntervalMs: 200, sweepMinAgeMs: 0 });
  try {
    expect(
      await until(
        () => unfoldedCount(account.accountId),
        (n) => n === 0,
        15_000,
      ),
    ).toBe(0);
  } finally {
    await taker.stop();
  }
}, 40_000);
