/**
 * The SIP gateway process. The supervisor starts it as the `sip` role; `bun sip-gateway/index.ts`
 * runs it alone (on its own machine, against the same PostgreSQL and Redis as the rest).
 */
// Registers the sip.js parser cache; every module that loads sip.js is imported after it, dynamically.
import "./grammar-cache";
import { config, type SipConfig } from "../src/config";
import { log } from "../src/http/log";
import { conferenceForMapperId } from "../src/modules/mapper/service";
import type { Running } from "../src/server";
import { HttpConferenceAdapter } from "./adapter";
import type { GatewayParts, SipGateway } from "./gateway";

/** Production wiring: the conference mapper for numeric ids, the HTTP adapter for joins. */
export function defaultParts(settings: SipConfig = config.sip): GatewayParts {
  return {
    settings,
    directory: { conferenceForMapperId },
    adapter: new HttpConferenceAdapter(settings.joinUrl, settings.joinTimeoutMs),
  };
}

export async function startSipGateway(parts: GatewayParts = defaultParts()): Promise<Running & { gateway: SipGateway }> {
  const { SipGateway } = await import("./gateway");
  const gateway = await SipGateway.start(parts);
  log.info({ udpPort: gateway.udpPort, tcpPort: gateway.tcpPort, address: gateway.address }, "sip gateway listening");
  return { gateway, stop: () => gateway.stop() };
}

/** The `sip` role: idle when SIP_ENABLED is off, so the supervisor's one-of-every-role start stays simple. */
export async function startSipRole(): Promise<Running> {
  if (!config.sip.enabled) return { stop: async () => {} };
  return startSipGateway();
}

async function runAlone(): Promise<void> {
  const { migrate } = await import("../src/db/migrate");
  const { runRole } = await import("../src/supervisor");
  await migrate();
  await runRole("sip");
}

// Not a top-level await: the role imports this module again, which must have finished evaluating.
if (import.meta.main) {
  runAlone().catch((error: Error) => {
    console.error(`parley sip gateway: ${error.message}`);
    process.exit(1);
  });
}
