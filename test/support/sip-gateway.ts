/**
 * Starts a real gateway on a free loopback port (UDP and TCP), wired as in production: the mapper and the HTTP adapter.
 */
import { config, type SipConfig } from "../../src/core/config";
import { defaultParts, startSipGateway } from "../../sip-gateway/role";
import { freePort } from "./ports";

export interface AdapterCall {
  event: string;
  callId: string;
  accountId: string;
  room: string;
  reason?: string;
  media: Record<string, unknown>;
}

/** A stand-in media bridge: records every join and leave the shipped adapter POSTs. */
export function startBridge(status = 200) {
  const received: AdapterCall[] = [];
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(request) {
      received.push((await request.json()) as AdapterCall);
      return new Response(null, { status });
    },
  });
  return { url: `http://127.0.0.1:${server.port}/calls`, received, stop: () => server.stop(true) };
}

export async function startTestGateway(overrides: Partial<SipConfig> = {}) {
  // freePort checks TCP only; on the rare clash with someone's UDP socket, take another port.
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const settings: SipConfig = {
      ...config.sip,
      bindAddress: "127.0.0.1",
      publicAddress: "127.0.0.1",
      udpPort: port,
      tcpPort: port,
      // sip.js's transaction timers are shared by every gateway in the process: one value for all.
      ackTimeoutMs: 1_000,
      ...overrides,
    };
    try {
      const running = await startSipGateway(defaultParts(settings));
      return { ...running, port, settings };
    } catch (error) {
      if (attempt === 5) throw error;
    }
  }
}
