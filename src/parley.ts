/**
 * `npm run parley -- <command>` in the repository: the `parley` command line (src/sdk/cli.ts).
 * With a Parley running here (DATA_DIR/parley.sock answers) or PARLEY_URL set, the command
 * goes through its admin API; with none, it runs on the database directly, as src/admin.ts
 * does (a first account before the first start, or work while Parley is stopped).
 */
import { runCli } from "./sdk/cli";

const exitCode = await runCli(process.argv.slice(2), {
  async direct(argv, why) {
    console.error(`parley: ${why.replace(/ \(set DATA_DIR.*$/, "")}; working on the database directly`);
    const { loadProcessConfig } = await import("./config");
    // The commands' modules open the database as they load: a wrong environment is reported before.
    if (!loadProcessConfig()) return 2;
    const { runAdmin } = await import("./admin-commands");
    return runAdmin(argv);
  },
});
process.exit(exitCode);
