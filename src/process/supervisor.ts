import { config } from "../core/config";
import { AppError, dependencyFailure } from "../core/errors";
import {
  guardAgainstStrayErrors,
  onStopSignal,
  type Running,
  runUntilStopped,
  STOP_MARGIN_MS,
} from "../core/lifecycle";
import { log } from "../core/log";
import { migrate } from "../db/migrate";
import { promptRedis, settledWithin, withinRedis } from "../queue/connection";
import { announce, CANNOT_LISTEN_EXIT_CODE } from "./children";
import { isRole, isRoleEnabled, ROLES, type Role } from "./roles";
import { cannotListen, isBindFailure } from "./port-guard";
import { buildProcess, type ProcessServices } from "./root";

/**
 * A child process: runs one role, or several worker roles together (`recorder,sip,cdr,webhooks`), until
 * SIGTERM, or until its supervisor (parentPid) is gone. A process started alone (on another machine, with no
 * supervisor of its own: `--role=sip` for a gateway there) applies the migrations first, as a supervisor does
 * before it starts its roles.
 */
export async function runRole(names: string, parentPid?: number, options: { alone?: boolean } = {}): Promise<void> {
  const roles = names.split(",");
  const unknown = roles.filter((name) => !isRole(name));
  if (unknown.length > 0) {
    console.error(`parley: unknown role "${unknown.join(", ")}"; roles are ${Object.keys(ROLES).join(", ")}`);
    process.exit(2);
  }
  // The API's processes share its port (API_PROCESSES of them): it runs in processes of its own.
  if (roles.length > 1 && (roles.includes("api") || new Set(roles).size < roles.length)) {
    console.error(`parley: --role=${names}: roles run together are worker roles, each named once; api runs alone`);
    process.exit(2);
  }
  guardAgainstStrayErrors();
  const services = await buildProcess(names);
  if (options.alone) await migrate();
  const enabled = (roles as Role[]).filter(isRoleEnabled);
  for (const role of roles) if (!enabled.includes(role as Role)) log.info({ role }, "role disabled by configuration");
  if (enabled.length === 0) {
    log.info({ role: names }, "nothing to run");
    await services.stop();
    return;
  }
  // Before the roles start: a signal during a slow start (one waiting for Redis) still drains what runs.
  runUntilStopped(services, parentPid);
  try {
    await startRoles(services, enabled);
  } catch (error) {
    if (!isBindFailure(error)) throw error;
    console.error(cannotListen(config, error));
    await services.stop();
    process.exit(CANNOT_LISTEN_EXIT_CODE);
  }
}

/**
 * Starts the roles on the process's services, one after another, and pushes their stop before the first
 * starts. The roles drain side by side, each within the grace period, before what they stand on stops:
 * the one grace bounds them all. A stop that comes while a role still starts lets it finish, starts no
 * other, and stops it with the rest: one that came up after the database and Redis closed ran against
 * them closed, and warned.
 */
async function startRoles(services: ProcessServices, roles: Role[]): Promise<void> {
  const running: Running[] = [];
  // The role being started: settled once it has joined `running`, or failed to start.
  let starting: Promise<void> = Promise.resolve();
  let stopping = false;
  services.stoppers.push("roles", async () => {
    stopping = true;
    // Only while Redis answers: a start may be waiting for a Redis out of reach, and a stop never waits on it.
    const redisAnswers = await withinRedis(promptRedis(), "stopping", () => promptRedis().ping()).then(
      () => true,
      () => false,
    );
    if (redisAnswers) await settledWithin(starting, STOP_MARGIN_MS);
    await Promise.all(running.map((role) => role.stop()));
  });
  for (const name of roles) {
    if (stopping) break;
    const started = ROLES[name](services).then((role) => {
      running.push(role);
    });
    starting = started;
    await started;
  }
}

async function superviseInProcess(services: ProcessServices): Promise<void> {
  guardAgainstStrayErrors();
  // Installed first: a signal during a slow role start must still drain what already runs.
  onStopSignal(services.stop);
  try {
    await startRoles(services, (Object.keys(ROLES) as Role[]).filter(isRoleEnabled));
  } catch (error) {
    if (!isBindFailure(error)) throw error;
    // What started is stopped and the database closed, so no socket, pid file or lock is left behind.
    console.error(cannotListen(config, error));
    await services.stop();
    process.exit(1);
  }
}

/** How often a supervisor started before its database tries again. */
const DATABASE_WAIT_MS = 1_000;

/**
 * Migrations and the first account, once the database answers: a supervisor started while
 * PostgreSQL is still starting (or down) waits for it instead of exiting.
 */
async function prepareDatabase({ database }: ProcessServices): Promise<void> {
  // Loaded here, and only when a first account may be made: every role's child process imports
  // this module too, and the accounts service brings the JWT library and more along.
  const bootstrap = config.admin.bootstrapAccount ? await import("../modules/accounts/bootstrap") : undefined;
  const { sealSecretsAtRest } = await import("./sealed-at-rest");
  for (let attempt = 1; ; attempt++) {
    try {
      await migrate();
      await sealSecretsAtRest(database);
      await bootstrap?.ensureFirstAccount();
      return;
    } catch (error) {
      // The sealing key does not open what is sealed: no wait mends that.
      if (error instanceof AppError) {
        console.error(`parley: ${error.message}`);
        process.exit(1);
      }
      const failure = dependencyFailure(error);
      if (!failure) throw error;
      if (attempt === 1 || attempt % 30 === 0) {
        const address = databaseAddress();
        log.warn(
          { setting: "DATABASE_URL", address, err: failure, attempt },
          `waiting for the database at DATABASE_URL ${address} (${failure}); trying every second. ` +
            "Nothing is served until it answers: migrations run first, then the API listens",
        );
      }
      await Bun.sleep(DATABASE_WAIT_MS);
    }
  }
}

/** DATABASE_URL without its credentials: the hosts and the database name. */
function databaseAddress(): string {
  return (config.database.url ?? "").replace(/\/\/[^@/]*@/, "//").replace(/\?.*$/, "");
}

/**
 * The embedded database's supervisor: every role in this one process. (On PostgreSQL the supervisor is
 * src/process/children.ts, and what it prepares first is `prepare` below, in a process of its own.)
 */
export async function supervise(): Promise<void> {
  const services = await buildProcess("supervisor");
  await prepareDatabase(services);
  log.info({ dataDir: config.database.dataDir }, "embedded database: running every role in this process");
  // Announced once the API answers, while the other roles start: a role waiting for an unreachable
  // Redis (the recorder's queue) must not hide that the API serves (the Redis warning says what waits).
  await Promise.all([superviseInProcess(services), announce()]);
}

/**
 * What a supervisor on PostgreSQL has done before it starts its roles, in a short process of its own
 * (`src/index.ts --prepare`): migrations, the sealing of what an older Parley stored in plain text, and
 * the first account, once the database answers. Its modules and its memory end with it, so the supervisor
 * that stays holds little more than Bun and its log.
 */
export async function prepare(): Promise<void> {
  guardAgainstStrayErrors();
  const services = await buildProcess("supervisor");
  await prepareDatabase(services);
  await services.stop();
}
