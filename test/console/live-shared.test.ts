/**
 * The console's live feeds share each view's figures: however many pages are open, a view of an
 * account is computed once a tick (the overview runs a week's usage report per account).
 */
import { expect, test } from "bun:test";
import { sharedSnapshot } from "../../src/modules/console/live";

const key = () => `test|${crypto.randomUUID()}`;

test("feeds asking at once, or within a tick of the last computation, share one computation", async () => {
  const view = key();
  let computed = 0;
  const compute = async () => {
    computed++;
    await Bun.sleep(50);
    return { n: computed };
  };
  const answers = await Promise.all(Array.from({ length: 5 }, () => sharedSnapshot(view, compute)));
  expect(computed).toBe(1);
  expect(new Set(answers.map((answer) => answer.json))).toEqual(new Set(['{"n":1}']));
  // How long it took, which sets how long the feeds wait before asking again.
  expect(answers[0]!.took).toBeGreaterThanOrEqual(45);
  expect((await sharedSnapshot(view, compute)).json).toBe('{"n":1}');
  expect(computed).toBe(1);
  // A tick after it ended, the next feed to ask computes the figures again.
  await Bun.sleep(1_050);
  expect((await sharedSnapshot(view, compute)).json).toBe('{"n":2}');
  expect(computed).toBe(2);
});

test("a failed computation fails its waiters and is not kept", async () => {
  const view = key();
  let calls = 0;
  const failing = async () => {
    calls++;
    await Bun.sleep(10);
    throw new Error("the report failed");
  };
  const settled = await Promise.allSettled(Array.from({ length: 3 }, () => sharedSnapshot(view, failing)));
  expect(
    settled.map((result) => (result.status === "rejected" ? (result.reason as Error).message : "answered")),
  ).toEqual(Array(3).fill("the report failed"));
  expect(calls).toBe(1);
  expect((await sharedSnapshot(view, async () => ({ ok: true }))).json).toBe('{"ok":true}');
});
