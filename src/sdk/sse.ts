/** Server-Sent Events read from a fetch body: the parser of the WHATWG event-stream format Parley writes. */

export interface ServerSentEvent {
  id?: string;
  event: string;
  data: string;
}

/** The events of one text/event-stream body, and the reconnection delay it asked for (`retry:`). */
export async function* serverSentEvents(
  body: ReadableStream<Uint8Array>,
  onRetry: (ms: number) => void = () => {},
): AsyncGenerator<ServerSentEvent> {
  const decoder = new TextDecoder();
  const reader = body.getReader();
  let buffer = "";
  let event: ServerSentEvent = { event: "message", data: "" };
  let hasData = false;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let end = buffer.search(/\r\n|\r|\n/);
      while (end !== -1) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + (buffer.startsWith("\r\n", end) ? 2 : 1));
        end = buffer.search(/\r\n|\r|\n/);
        if (line === "") {
          if (hasData) yield { ...event, data: event.data.slice(0, -1) };
          event = { event: "message", data: "" };
          hasData = false;
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon === -1 ? line : line.slice(0, colon);
        const value = colon === -1 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "data") {
          event.data += `${value}\n`;
          hasData = true;
        } else if (field === "event") event.event = value;
        else if (field === "id" && !value.includes("\0")) event.id = value;
        else if (field === "retry" && /^\d+$/.test(value)) onRetry(Number(value));
      }
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}
