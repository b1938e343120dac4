/**
 * A worker's shares of its slots (src/modules/webhooks/shares.ts): which endpoints a claim leaves
 * out. An endpoint alone holds every slot, so it is at its share all the time; while its answers
 * come it must stay claimable, or its claims come back empty and its batches are cut and given
 * back. Only one at its share none of whose attempts ended for STALLED_MS (a silent receiver) is
 * left out, or, beside others, one at its share with as many again waiting and no answer for 20 ms.
 */
import { expect, test } from "bun:test";
import type { Claimed } from "../../src/modules/webhooks/delivery";
import { SlotShares, STALLED_MS } from "../../src/modules/webhooks/shares";

let ids = 0;
const row = (endpoint: string) => ({ row: { id: ++ids, endpoint_id: endpoint } as Claimed });

/** `slots` slots and `count` deliveries of `endpoint` waiting, all started that fit. */
function started(shares: SlotShares<{ row: Claimed }>, endpoint: string, count: number) {
  for (let i = 0; i < count; i++) shares.push(row(endpoint));
  const begun: Claimed[] = [];
  for (let next = shares.next(); next; next = shares.next()) begun.push(next.row);
  return begun;
}

test("an endpoint alone at its share whose attempts end stays claimable; once none ends it is left out", async () => {
  const shares = new SlotShares<{ row: Claimed }>(4);
  const begun = started(shares, "a", 10);
  expect(begun).toHaveLength(4);
  // At its share (every slot), but it has just started: not stalled.
  expect(shares.full()).toEqual([]);
  expect(shares.stalledIn(["a"])).toBeGreaterThan(0);
  // Its answers come: each end starts the next, and it is never left out.
  for (let i = 0; i < 6; i++) {
    shares.done(begun.shift()!);
    begun.push(shares.next()!.row);
    expect(shares.full()).toEqual([]);
  }
  // Nothing ends for STALLED_MS: a silent receiver, left out of claims, its waiting rows can be given back.
  await Bun.sleep(STALLED_MS + 10);
  expect(shares.full()).toEqual(["a"]);
  expect(shares.stalledIn(["a"])).toBe(0);
  // One attempt ends: it moves again.
  shares.done(begun.shift()!);
  expect(shares.full()).toEqual([]);
});

test("an endpoint below its share is never stalled; one silent beside it is", async () => {
  const shares = new SlotShares<{ row: Claimed }>(4);
  started(shares, "silent", 4);
  // Two endpoints with work: a share of two slots each. The silent one holds four from when it was alone.
  expect(started(shares, "healthy", 1)).toHaveLength(1);
  await Bun.sleep(STALLED_MS + 10);
  expect(shares.full()).toEqual(["silent"]);
  expect(shares.stalledIn(["healthy"])).toBeUndefined();
  expect(shares.stalledIn(["silent", "healthy"])).toBeUndefined();
  expect(shares.stalledIn(["silent"])).toBe(0);
});

test("beside others, one at its share, as many again waiting, no answer for 20 ms, is left out", async () => {
  const shares = new SlotShares<{ row: Claimed }>(4);
  started(shares, "healthy", 1);
  // A share of two slots each: two of the new one's four start, two wait.
  const begun = started(shares, "new", 4);
  expect(begun).toHaveLength(2);
  // Its attempts have just begun: claims still take its rows.
  expect(shares.full()).toEqual([]);
  // Its answers come: each end starts the next, and with rows waiting it stays claimable.
  for (let i = 0; i < 3; i++) {
    await Bun.sleep(10);
    shares.done(begun.shift()!);
    begun.push(shares.next()!.row);
    shares.push(row("new"));
    expect(shares.full()).toEqual([]);
  }
  // None ends for 20 ms, a share's worth waiting: a claim leaves its rows, before the 50 ms that stall it.
  await Bun.sleep(25);
  expect(shares.full()).toEqual(["new"]);
  // Alone, it holds every slot, and no count of waiting rows leaves it out (only a stall does).
  const alone = new SlotShares<{ row: Claimed }>(4);
  started(alone, "a", 12);
  await Bun.sleep(25);
  expect(alone.full()).toEqual([]);
});
