/** Starts a real gateway on free loopback ports, with a conference adapter that POSTs to a local listener. */
import { config, type SipConfig } from "../../src/config";
import { HttpConferenceAdapter } from "../../sip-gateway/adapter";
import { defaultParts, startSipGateway } from "../../sip-gateway/index";
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
  const parts = defaultParts(settings);
  parts.adapter = new HttpConferenceAdapter(settings.joinUrl, settings.joinTimeoutMs);
  const running = await startSipGateway(parts);
  return { ...running, port, settings };
}
