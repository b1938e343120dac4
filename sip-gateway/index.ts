/**
 * `bun sip-gateway/index.ts` runs the SIP gateway alone (on its own machine, against the same
 * PostgreSQL and Redis as the rest). The settings are checked before the role is loaded,
 * since the modules it loads read them as they load: a wrong one is named and the process
 * exits 2, as the other entry points do.
 */
import { loadProcessConfig } from "../src/core/config";
import { joinPrivateRedis } from "../src/process/private-redis";

if (!loadProcessConfig()) process.exit(2);
// Alone on a machine whose Parley runs a private Redis, with no Redis named: that one.
if (await joinPrivateRedis()) loadProcessConfig();
const { runAlone } = await import("./role");
runAlone().catch((error: Error) => {
  console.error(`parley sip gateway: ${error.message}`);
  process.exit(1);
});
