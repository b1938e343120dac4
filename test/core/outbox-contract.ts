/**
 * The outbox's contract (src/core/outbox.ts), proven for any consumer: given how to record its
 * facts, start it and read what it handled, these tests show every committed fact handled at
 * least once with the doorbell dead, none lost when a drain dies midway, a key's facts handled
 * in order, and nothing for a rolled-back transaction. Each consumer's own test calls it. The
 * fixture's `record` rings the outbox it is given, in the recording transaction.
 */
import { afterEach, expect, test } from "bun:test";
import { createOutbox, type Outbox, type RegisteredConsumer } from "../../src/core/outbox";
import { LocalPubSub, type PubSub } from "../../src/core/pubsub";
import { afterCommit } from "../../src/db/client";
import { PROMPT_REDIS_MS } from "../../src/queue/connection";
import { until } from "../support/wait";

export interface OutboxFixture {
  /** Records `count` facts of `key` in one transaction, ringing through `outbox`; rolls it back when `rollBack`. */
  record(outbox: Outbox, key: string, count: number, rollBack?: boolean): Promise<void>;
  /** Starts the consumer on `outbox` (one per process it would run in), sweeping every `sweepEveryMs`. */
  start(outbox: Outbox, sweepEveryMs: number): RegisteredConsumer;
  /** Per key, the committed facts, oldest first. */
  recorded(): Promise<Map<string, string[]>>;
  /** Per key, the facts handled in the order their handling committed (one handled twice shows twice). */
  handled(): Promise<Map<string, string[]>>;
  /** The next drain dies after claiming its facts and before its transaction commits. */
  crashNextDrain(): void | Promise<void>;
  /** Whether the consumer keeps a key's facts in order (a consumer whose handling is order-free says no). */
  ordersPerKey: boolean;
}

/** A process whose publishes go nowhere: its rings reach no other process. */
const deadBus: PubSub = {
  publish: async () => {
    throw new Error("the doorbell is dead");
  },
  subscribe: () => ({ ready: Promise.resolve(), settle: async () => {}, close: async () => {} }),
};

/**
 * The contract's processes talk over a bus of their own, so only the rings the fixture gives
 * them reach its consumers (the process's own outbox may ring the same consumer names).
 */
const cluster = new LocalPubSub();

/** An outbox of a process of its own, as another process's would be. */
export const processOutbox = (bus: PubSub = cluster): Outbox =>
  createOutbox({ afterCommit, pubsub: () => bus, publishWithinMs: PROMPT_REDIS_MS });

const lost = (recorded: Map<string, string[]>, handled: Map<string, string[]>) =>
  [...recorded].flatMap(([key, facts]) => facts.filter((fact) => !(handled.get(key) ?? []).includes(fact)));

const allHandled = (fixture: OutboxFixture, timeoutMs = 15_000) =>
  until(
    async () => lost(await fixture.recorded(), await fixture.handled()),
    (missing) => missing.length === 0,
    timeoutMs,
  );

export function outboxContract(name: string, fixture: () => OutboxFixture): void {
  const started: RegisteredConsumer[] = [];
  const start = (f: OutboxFixture, outbox: Outbox, sweepEveryMs: number) => {
    const consumer = f.start(outbox, sweepEveryMs);
    started.push(consumer);
    return consumer;
  };
  afterEach(async () => {
    await Promise.all(started.splice(0).map((consumer) => consumer.stop()));
  });

  test(`${name}: a ring from this process and one from another get the facts handled before any sweep`, async () => {
    const f = fixture();
    const here = processOutbox();
    await start(f, here, 600_000).ready;
    await f.record(here, "local", 3);
    await f.record(processOutbox(), "remote", 3);
    expect(await allHandled(f)).toEqual([]);
  });

  test(`${name}: with the doorbell dead every committed fact is handled by the sweep`, async () => {
    const f = fixture();
    await start(f, processOutbox(), 200).ready;
    const silent = processOutbox(deadBus);
    for (let i = 0; i < 5; i++) await f.record(silent, `k${i % 2}`, 2);
    expect(await allHandled(f)).toEqual([]);
  });

  test(`${name}: a drain that dies midway loses nothing acknowledged`, async () => {
    const f = fixture();
    const here = processOutbox();
    await start(f, here, 200).ready;
    await f.crashNextDrain();
    await f.record(here, "crash", 4);
    expect(await allHandled(f)).toEqual([]);
  });

  test(`${name}: a key's facts are handled in the order they were recorded, across processes`, async () => {
    const f = fixture();
    const [first, second] = [processOutbox(), processOutbox()];
    await Promise.all([start(f, first, 300).ready, start(f, second, 300).ready]);
    const writers = ["a", "b"].map(async (key) => {
      for (let i = 0; i < 6; i++) await f.record(i % 2 === 0 ? first : second, key, 2);
    });
    await Promise.all(writers);
    expect(await allHandled(f)).toEqual([]);
    if (!f.ordersPerKey) return;
    const [recorded, handled] = [await f.recorded(), await f.handled()];
    for (const [key, facts] of recorded) expect([...new Set(handled.get(key))]).toEqual(facts);
  });

  test(`${name}: a rolled-back transaction's facts are never handled`, async () => {
    const f = fixture();
    const silent = processOutbox(deadBus);
    await start(f, processOutbox(), 200).ready;
    await f.record(processOutbox(), "rolled-back", 3, true);
    // Recorded after, with no ring: once it is handled, a sweep has run since the rollback.
    await f.record(silent, "kept", 1);
    expect(await allHandled(f)).toEqual([]);
    expect((await f.handled()).get("rolled-back") ?? []).toEqual([]);
    expect((await f.recorded()).get("rolled-back") ?? []).toEqual([]);
  });
}
