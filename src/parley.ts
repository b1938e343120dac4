/**
 * `npm run parley -- <command>` in the repository (`npm run admin` is the same): the one
 * `parley` command line (src/sdk/cli.ts). With a Parley running here (DATA_DIR/parley.sock
 * answers) or PARLEY_URL set, the command goes to its admin API. With none running, this
 * process opens the database itself (a first account before the first start, work while
 * Parley is stopped) and serves the admin API on the socket for the one command (direct
 * mode): the same routes, services, answers and audit entries as a running Parley's, the
 * entries by `local:<uid>:direct`, with the socket held so that nothing else starts on the
 * folder meanwhile. A Parley that holds the embedded database without answering on the
 * socket (still starting, say) makes the database refuse this process (src/db/client.ts).
 */
import { keepNewFilesPrivate } from "./core/private-dir";
import { runCli } from "./sdk/cli";

// Without a running Parley this process writes the data folder itself.
keepNewFilesPrivate();

const exitCode = await runCli(process.argv.slice(2), {
  invocation: "npm run parley --",
  async direct(argv, why) {
    console.error(`parley: ${why.replace(/ \(set DATA_DIR.*$/, "")}; working on the database directly`);
    // The app logs to stdout, where the command's own answer goes: only its errors are wanted here.
    process.env.LOG_LEVEL = "error";
    const { loadProcessConfig } = await import("./core/config");
    // The app's modules read the settings as they load: a wrong environment is reported before.
    if (!loadProcessConfig()) return 2;
    if (await (await import("./process/private-redis")).joinPrivateRedis()) loadProcessConfig();
    const [{ migrate }, { sealSecretsAtRest }, { AppError }, { createApp }, { localOperator, serveLocalSocket }, root] =
      await Promise.all([
        import("./db/migrate"),
        import("./process/sealed-at-rest"),
        import("./core/errors"),
        import("./process/app"),
        import("./modules/admin/local"),
        import("./process/root"),
      ]);
    const services = await root.buildProcess("command");
    try {
      await migrate();
      try {
        await sealSecretsAtRest(services.database);
      } catch (error) {
        // A sealing key that does not open what is sealed: no command may seal under it.
        if (!(error instanceof AppError)) throw error;
        console.error(`parley: ${error.message}`);
        return 1;
      }
      const app = createApp();
      const socket = await serveLocalSocket((request) => app.handle(request), localOperator("direct"));
      try {
        // Without a socket of its own another Parley has started meanwhile, and answers instead.
        return await runCli(argv, { invocation: "npm run parley --" });
      } finally {
        await socket?.stop();
      }
    } finally {
      await services.stop();
    }
  },
});
process.exit(exitCode);
