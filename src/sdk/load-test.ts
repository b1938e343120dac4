/**
 * `parley load-test`: a mixed load against any Parley, by its URL and an account's API key, from
 * wherever it runs. Each part runs at a fixed rate (an open loop: a slow answer does not slow
 * the load down), times every operation, and is judged against the objectives (docs/cli.md):
 *
 * - token: POST /api/v1/misc/generate-token;
 * - chat: senders push `new_message` on Phoenix sockets, receivers in the same room time each
 *   broadcast from its push;
 * - events: event_sync deliveries, a room's life (created, joined, left, destroyed) at a time;
 * - webhooks: the deliveries of those events to a sink this process serves, signatures verified,
 *   timed from the event_sync delivery that caused them;
 * - llhls: blocking LL-HLS viewers of a live stream named by --stream, or started by --start-stream.
 *
 * What it creates is named `loadtest-<id>`; the webhook endpoint is removed, the chat room
 * emptied and a stream it started stopped at the end.
 *
 * The run is here; what it is asked (load-test-options.ts), how it counts (load-test-tally.ts)
 * and each part (load-test-chat.ts, load-test-events.ts, load-test-llhls.ts) are beside it.
 */
import { setUpChat } from "./load-test-chat.js";
import { runEvents, setUpWebhooks } from "./load-test-events.js";
import { setUpLlhls } from "./load-test-llhls.js";
import { type LoadTestOptions, type Objective, PARTS, type PartName } from "./load-test-options.js";
import { message, type PartResult, paced, Tally, timed } from "./load-test-tally.js";
import { Parley } from "./client.js";
import { ParleyError } from "./errors.js";

export interface LoadTestResult {
  id: string;
  url: string;
  duration_s: number;
  parts: Record<PartName, PartResult>;
  objectives: Array<{ objective: string; part: PartName; value: number | null; met: boolean }>;
  pass: boolean;
}

export class LoadTestRefused extends Error {}

/** Runs the load; throws LoadTestRefused when the key is refused, ParleyError when Parley cannot be reached. */
export async function runLoadTest(options: LoadTestOptions): Promise<LoadTestResult> {
  const id = crypto.randomUUID().slice(0, 8);
  const base = options.url.replace(/\/+$/, "");
  const auth = { authorization: `Bearer ${options.key}`, "content-type": "application/json" };
  const parley = new Parley({ baseUrl: base, apiKey: options.key, retry: { retries: 0 } });
  // The key is tried once before any load: a refused key is the operator's mistake, not a result.
  try {
    await parley.generateToken({ user: { id: `loadtest-${id}` }, scope: "messaging", exp: "5m" });
  } catch (error) {
    if (error instanceof ParleyError && (error.status === 401 || error.status === 403))
      throw new LoadTestRefused(`the API key was refused: ${error.message}`);
    throw error;
  }
  const tallies = Object.fromEntries(PARTS.map((part) => [part, new Tally()])) as Record<PartName, Tally>;
  const cleanups: Array<() => Promise<void>> = [];
  let stopAt = Number.POSITIVE_INFINITY;
  const running = () => performance.now() < stopAt;
  const interrupt = () => {
    stopAt = performance.now();
  };
  process.once("SIGINT", interrupt);
  try {
    if (options.rates.token <= 0) tallies.token.skip("--rate token=0");
    // Setup first, so that every part starts its load at the same moment.
    const chat = await setUpChat(base, parley, id, options, tallies.chat, cleanups);
    const webhooks = await setUpWebhooks(parley, id, options, tallies.webhooks, cleanups);
    const llhls = await setUpLlhls(base, parley, id, options, tallies.llhls, cleanups);

    const started = performance.now();
    stopAt = Math.min(stopAt, started + options.durationMs);
    const ticker = setInterval(() => {
      const seconds = Math.round((performance.now() - started) / 1000);
      const parts = PARTS.map((part) => {
        const tally = tallies[part];
        return tally.status === "ran" ? `${part} ${tally.samples.length}/${tally.errors}e` : `${part} -`;
      });
      options.progress?.(`load-test ${seconds}s/${Math.round(options.durationMs / 1000)}s  ${parts.join("  ")}`);
    }, 1000);
    try {
      await Promise.all([
        tallies.token.status === "ran"
          ? paced(options.rates.token, running, async () => {
              await timed(tallies.token, () =>
                fetch(`${base}/api/v1/misc/generate-token`, {
                  method: "POST",
                  headers: auth,
                  body: JSON.stringify({ user: { id: `loadtest-${id}-token` }, scope: "messaging", exp: "5m" }),
                }),
              );
            })
          : undefined,
        chat?.run(running),
        runEvents(base, auth, id, options.rates.events, running, tallies.events, webhooks),
        llhls?.run(running),
      ]);
      // Broadcasts and webhooks still on their way are waited for (5 s at most), then counted as lost.
      await Promise.all([chat?.settle(), webhooks?.settle()]);
    } finally {
      clearInterval(ticker);
    }
    // Throughput is over the time the load was offered, not the wait for the last answers.
    const seconds = Math.max(0.001, (Math.min(stopAt, performance.now()) - started) / 1000);
    const parts = Object.fromEntries(PARTS.map((part) => [part, tallies[part].result(seconds)])) as Record<
      PartName,
      PartResult
    >;
    const judged = judge(parts, options.objectives);
    const pass = judged.every((entry) => entry.met) && PARTS.every((part) => parts[part].status !== "failed");
    return {
      id: `loadtest-${id}`,
      url: base,
      duration_s: Math.round(seconds * 10) / 10,
      parts,
      objectives: judged,
      pass,
    };
  } finally {
    process.off("SIGINT", interrupt);
    for (const cleanup of cleanups.reverse())
      await cleanup().catch((error: unknown) => options.progress?.(`load-test: could not clean up: ${message(error)}`));
  }
}

function judge(parts: Record<PartName, PartResult>, objectives: Objective[]): LoadTestResult["objectives"] {
  return objectives.flatMap((objective) =>
    (objective.part === "*" ? PARTS : [objective.part])
      .filter((part) => parts[part].status === "ran")
      .map((part) => {
        const result = parts[part];
        const attempts = result.operations + result.errors;
        const value =
          objective.metric === "errors"
            ? attempts === 0
              ? null
              : Math.round((result.errors / attempts) * 100_000) / 1000
            : result[`${objective.metric}_ms`];
        // Nothing measured is nothing met: a part that ran and answered nothing has failed.
        return { objective: objective.text, part, value, met: value !== null && value < objective.limit };
      }),
  );
}
