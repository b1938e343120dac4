/** The SIP gateway role: the supervisor starts it as `sip`, and `src/index.ts --role=sip` runs it alone. */
// Register the sip.js patches (parser cache, merged-request index);
// every module that loads sip.js is imported after them, dynamically.
import "./grammar-cache";
import "./merged-requests";
import { config, type SipConfig } from "../src/core/config";
import type { Running } from "../src/core/lifecycle";
import { log } from "../src/core/log";
import { conferenceForMapperId } from "../src/modules/mapper";
import { HttpConferenceAdapter } from "./adapter";
import type { GatewayParts, SipGateway } from "./gateway";
import { endForgottenCalls } from "./call-log";
import { startLostCallReconciler } from "./lost-calls";

/** Production wiring: the conference mapper for numeric ids, the HTTP adapter for joins. */
export function defaultParts(settings: SipConfig = config.sip): GatewayParts {
  return {
    settings,
    directory: { conferenceForMapperId },
    adapter: new HttpConferenceAdapter(settings.joinUrl, settings.joinTimeoutMs),
  };
}

export async function startSipGateway(
  parts: GatewayParts = defaultParts(),
): Promise<Running & { gateway: SipGateway }> {
  const { SipGateway } = await import("./gateway");
  const gateway = await SipGateway.start(parts);
  // The calls this gateway itself let go of without their end: looked for each time it looks for lost gateways.
  const lostCalls = startLostCallReconciler((own) => endForgottenCalls(Date.now(), own));
  log.info({ udpPort: gateway.udpPort, tcpPort: gateway.tcpPort, address: gateway.address }, "sip gateway listening");
  return {
    gateway,
    async stop() {
      await gateway.stop();
      await lostCalls.stop();
    },
  };
}
