/**
 * `parley load-test`'s chat part: senders push `new_message` on Phoenix sockets, receivers in the
 * same room time each broadcast from its push. Apart because only it holds sockets.
 */
import type { Parley } from "./client.js";
import type { LoadTestOptions } from "./load-test-options.js";
import { message, paced, sleep, type Tally } from "./load-test-tally.js";

/** Senders and receivers on the Phoenix client, in one room of their own. */
export async function setUpChat(
  base: string,
  parley: Parley,
  id: string,
  options: LoadTestOptions,
  tally: Tally,
  cleanups: Array<() => Promise<void>>,
) {
  if (options.rates.chat <= 0) return tally.skip("--rate chat=0");
  if (typeof globalThis.WebSocket !== "function")
    return tally.skip("this runtime has no WebSocket: run it on Node.js 22 or later, or Bun");
  const { Socket } = await import("phoenix");
  const channelId = `loadtest-${id}`;
  const topic = `chat:${channelId}`;
  const endpoint = `${base.replace(/^http/, "ws")}/api/v1/messaging`;
  const sentAt = new Map<number, number>();
  let acknowledged = 0;
  let delivered = 0;
  const sockets: InstanceType<typeof Socket>[] = [];
  const join = async (name: string) => {
    const token = await parley.generateToken({ user: { id: `${channelId}-${name}`, name }, scope: "messaging" });
    const socket = new Socket(endpoint, { params: { token }, reconnectAfterMs: () => 3_600_000, timeout: 5_000 });
    sockets.push(socket);
    socket.connect();
    const channel = socket.channel(topic);
    await new Promise<void>((done, refuse) => {
      channel
        .join(5_000)
        .receive("ok", () => done())
        .receive("error", (answer: unknown) => refuse(new Error(`join refused: ${JSON.stringify(answer)}`)))
        .receive("timeout", () => refuse(new Error("join timed out")));
    });
    return { token, channel };
  };
  try {
    const ownerToken = await parley.generateToken({ user: { id: `${channelId}-owner` }, scope: "messaging" });
    const owner = parley.with({ token: ownerToken });
    await owner.chat.createRoom({ channel_id: channelId });
    cleanups.push(async () => {
      await owner.chat.deleteMessages(channelId, { is_empty: true });
    });
    cleanups.push(async () => {
      await Promise.all(sockets.map((socket) => new Promise<void>((done) => socket.disconnect(() => done()))));
    });
    const receivers = await Promise.all(Array.from({ length: options.receivers }, (_, n) => join(`receiver-${n}`)));
    for (const { channel } of receivers) {
      channel.on("new_message", (pushed: { content?: string }) => {
        const match = /^loadtest (\d+)$/.exec(pushed.content ?? "");
        const at = match ? sentAt.get(Number(match[1])) : undefined;
        if (at === undefined) return;
        delivered++;
        tally.ok(at);
      });
    }
    const senders = await Promise.all(Array.from({ length: options.senders }, (_, n) => join(`sender-${n}`)));
    let sequence = 0;
    return {
      run: (running: () => boolean) =>
        paced(options.rates.chat, running, async () => {
          const number = sequence++;
          const sender = senders[number % senders.length]!;
          sentAt.set(number, performance.now());
          await new Promise<void>((done) => {
            sender.channel
              .push("new_message", { content: `loadtest ${number}` }, 5_000)
              .receive("ok", () => {
                acknowledged++;
                done();
              })
              .receive("error", (answer: unknown) => {
                tally.fail(`new_message refused: ${JSON.stringify(answer)}`);
                done();
              })
              .receive("timeout", () => {
                tally.fail("new_message not answered within 5 s");
                done();
              });
          });
        }),
      async settle() {
        const expected = () => acknowledged * options.receivers;
        const deadline = performance.now() + 5_000;
        while (delivered < expected() && performance.now() < deadline) await sleep(50);
        const missing = expected() - delivered;
        if (missing > 0) {
          tally.errors += missing;
          tally.firstError ??= `${missing} broadcasts never reached their receiver`;
        }
      },
    };
  } catch (error) {
    return tally.skip(`could not set up: ${message(error)}`, "failed");
  }
}
