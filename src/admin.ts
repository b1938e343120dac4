/**
 * The operator's commands on the database directly: `npm run admin <command> [...]`, and
 * `npm run parley` when no Parley runs (src/parley.ts). Exit codes: 0 done,
 * 1 the command failed (for example an unknown account), 2 the command was misused.
 */
import { loadProcessConfig } from "./config";
import { keepNewFilesPrivate } from "./core/private-dir";
import { joinPrivateRedis } from "./private-redis";

keepNewFilesPrivate();

// The commands' modules open the database as they load: a wrong environment is reported before.
if (!loadProcessConfig()) process.exit(2);
if (await joinPrivateRedis()) loadProcessConfig();
const { runAdmin } = await import("./admin-commands");
process.exit(await runAdmin(process.argv.slice(2)));
