/** A fetch that sends a request again when Parley answers 429 or 503, after the Retry-After it gives. */

export interface RetryOptions {
  /** Further attempts after the first (3). 0 turns retrying off. */
  retries?: number;
  /** The longest wait Parley may ask for; a longer Retry-After is answered with the error instead (30 000 ms). */
  maxDelayMs?: number;
}

const RETRIED = new Set([429, 503]);

/** Milliseconds a Retry-After header asks for (seconds or an HTTP date), or undefined. */
function retryAfterMs(header: string | null, now = Date.now()): number | undefined {
  if (header === null || header.trim() === "") return undefined;
  const seconds = Number(header);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const at = Date.parse(header);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

const sleep = (ms: number, signal: AbortSignal | null) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(signal.reason);
    });
  });

/**
 * How long to wait before sending again after `answer`, the `attempt`th (from 0) in a row to
 * be refused: what Retry-After says on a 429 or 503 (or 0.5 s, 1 s, 2 s… without one), or
 * undefined when it is not to be sent again (another status, retries used up, a longer wait).
 */
export function retryDelayMs(answer: Response, attempt: number, options: RetryOptions = {}): number | undefined {
  if (!RETRIED.has(answer.status) || attempt >= (options.retries ?? 3)) return undefined;
  const wait = retryAfterMs(answer.headers.get("retry-after")) ?? 500 * 2 ** attempt;
  return wait > (options.maxDelayMs ?? 30_000) ? undefined : wait;
}

/** Wraps `send` so that a 429 or 503 is tried again as retryDelayMs says. The last answer is returned as it came. */
export function retrying(
  send: (request: Request) => Promise<Response>,
  options: RetryOptions = {},
): (request: Request) => Promise<Response> {
  const retries = options.retries ?? 3;
  return async (request) => {
    for (let attempt = 0; ; attempt++) {
      // The body is read by the attempt, so each attempt sends its own copy.
      const answer = await send(attempt < retries ? request.clone() : request);
      const wait = retryDelayMs(answer, attempt, options);
      if (wait === undefined) return answer;
      await answer.body?.cancel();
      await sleep(wait, request.signal);
    }
  };
}
