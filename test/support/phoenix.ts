/** The unmodified `phoenix` npm client against a Parley listener, with promise helpers and time limits. */
import { type Channel, Socket } from "phoenix";

const WAIT_MS = 5_000;
/** How long an awaited broadcast may take: generous, since waiting ends as it arrives; a loaded machine needs it. */
const EVENT_WAIT_MS = 15_000;

/** `heartbeatIntervalMs` (the client's 30 s otherwise) keeps a socket alive on a process with a short idle timeout. */
export function connect(baseUrl: string, token: string, options: { heartbeatIntervalMs?: number } = {}): Socket {
  // No reconnects: a test that loses its socket should fail, not retry.
  const socket = new Socket(`${baseUrl}/api/v1/messaging`, {
    params: { token },
    reconnectAfterMs: () => 3_600_000,
    timeout: WAIT_MS,
    ...options,
  });
  socket.connect();
  return socket;
}

export function join(channel: Channel): Promise<any> {
  return new Promise((resolve, reject) => {
    channel
      .join(WAIT_MS)
      .receive("ok", resolve)
      .receive("error", (response: unknown) =>
        reject(Object.assign(new Error(`join refused: ${JSON.stringify(response)}`), { response })),
      )
      .receive("timeout", () => reject(new Error("join timed out")));
  });
}

/** Pushes and resolves with the reply: `{ status, response }`. */
export function push(channel: Channel, event: string, payload: object): Promise<{ status: string; response: any }> {
  return new Promise((resolve, reject) => {
    channel
      .push(event, payload, WAIT_MS)
      .receive("ok", (response: unknown) => resolve({ status: "ok", response }))
      .receive("error", (response: unknown) => resolve({ status: "error", response }))
      .receive("timeout", () => reject(new Error(`${event} timed out`)));
  });
}

/** Records every payload of the events named, from now on, and waits for matching ones. */
export function recorder(channel: Channel, events: string[]) {
  const seen: Array<{ event: string; payload: any }> = [];
  const waiters: Array<() => void> = [];
  for (const event of events) {
    channel.on(event, (payload: unknown) => {
      seen.push({ event, payload });
      for (const wake of waiters.splice(0)) wake();
    });
  }
  return {
    seen,
    /** Resolves with the first recorded payload of `event` that satisfies `match`. */
    async next(event: string, match: (payload: any) => boolean = () => true, ms = EVENT_WAIT_MS): Promise<any> {
      const deadline = Date.now() + ms;
      for (;;) {
        const found = seen.find((entry) => entry.event === event && match(entry.payload));
        if (found) return found.payload;
        const left = deadline - Date.now();
        if (left <= 0)
          throw new Error(`no ${event} within ${ms} ms; saw ${JSON.stringify(seen.map((entry) => entry.event))}`);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, left);
          waiters.push(() => {
            clearTimeout(timer);
            resolve();
          });
        });
      }
    },
  };
}

export function disconnect(socket: Socket): Promise<void> {
  return new Promise((resolve) => socket.disconnect(() => resolve()));
}
