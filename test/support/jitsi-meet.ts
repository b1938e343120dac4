/**
 * jitsi-meet's own code, for the tests that hold Parley to it: the `react/features/` sources
 * the npm registry ships in `@jitsi/react-native-sdk` (jitsi/jitsi-meet, Apache-2.0,
 * copyright 8x8). The package itself cannot be installed here (two of its dependencies are
 * GitHub tarballs, and it wants react-native as peers), so only its own tarball is taken:
 * `npm pack` into node_modules/.cache/jitsi-sdk/, checked against the registry's integrity
 * hash pinned below, extracted there (outside the tracked tree). The first run needs the
 * registry; later runs load the extracted files.
 *
 * The files are imported unmodified. Their npm imports are devDependencies, at the versions
 * the SDK pins. Two kinds of import are resolved here instead of by Bun:
 * - a module jitsi-meet has per platform (`./strings` is strings.web.ts or
 *   strings.native.ts): the web file, as jitsi-meet's web build picks it; and
 * - the modules invite/functions.ts imports for features other than dial-in (redux state,
 *   i18n, recording, the lib-jitsi-meet bundle, …), which pull react-native in: each is a
 *   stand-in that throws when called, so a test that reached one would fail, not pass; and
 *   `@jitsi/js-utils`, of which functions.ts uses only the local-storage submodule: that
 *   submodule, real, without the package's browser-only rest.
 */
import { mock } from "bun:test";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync } from "node:fs";
import { join, relative } from "node:path";

const PACKAGE = "@jitsi/react-native-sdk";
const VERSION = "13.2.0";
/** `npm view @jitsi/react-native-sdk@13.2.0 dist.integrity` */
const INTEGRITY = "sha512-J7itSoy85IScxeC4letOtoS33Sp0tH5hLYFHYtH+v3WQwLjganuWlFCjlDbL5ks9ebGhVNsCyCBdML9qC+SAWw==";
const CACHE = join(import.meta.dir, "..", "..", "node_modules", ".cache", "jitsi-sdk");
const FEATURES = join(CACHE, VERSION, "react", "features");

function run(command: string[], cwd: string): string {
  const result = Bun.spawnSync(command, { cwd, stdout: "pipe", stderr: "pipe", timeout: 120_000 });
  if (result.exitCode !== 0)
    throw new Error(`${command.join(" ")} failed (${result.exitCode}): ${result.stderr.toString()}`);
  return result.stdout.toString();
}

/** The extracted `react/features/` folder, packed and checked first when it is not there yet. */
export function jitsiMeetFeatures(): string {
  if (existsSync(join(FEATURES, "invite", "functions.ts"))) return FEATURES;
  mkdirSync(CACHE, { recursive: true });
  const work = mkdtempSync(join(CACHE, "pack-"));
  try {
    run(["npm", "pack", `${PACKAGE}@${VERSION}`, "--pack-destination", work, "--silent"], work);
    const tarball = readdirSync(work).find((name) => name.endsWith(".tgz"));
    if (!tarball) throw new Error(`npm pack ${PACKAGE}@${VERSION} left no tarball in ${work}`);
    const integrity = `sha512-${createHash("sha512")
      .update(readFileSync(join(work, tarball)))
      .digest("base64")}`;
    if (integrity !== INTEGRITY) throw new Error(`${tarball}: integrity ${integrity}, the registry's is ${INTEGRITY}`);
    run(["tar", "-xzf", tarball, "package/react/features", "package/package.json"], work);
    const version = JSON.parse(readFileSync(join(work, "package", "package.json"), "utf8")).version;
    if (version !== VERSION) throw new Error(`${tarball} holds version ${version}`);
    // Renamed into place whole, so a run cut short never leaves a half-extracted tree behind.
    // Test files run in parallel: when another one got there first, its copy is as good.
    try {
      renameSync(join(work, "package"), join(CACHE, VERSION));
    } catch (error) {
      if (!existsSync(join(FEATURES, "invite", "functions.ts"))) throw error;
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return FEATURES;
}

/** A module specifier for mock.module: relative to this file, which is how Bun matches a path that does not exist. */
function near(path: string): string {
  const rel = relative(import.meta.dir, path);
  return rel.startsWith(".") ? rel : `./${rel}`;
}

/** The per-platform modules on the tested paths, as the web build resolves them. */
const WEB_MODULES = ["base/util/strings", "base/logging/LogTransport"];

async function resolveForWeb(features: string) {
  for (const name of WEB_MODULES) {
    const web = await import(join(features, `${name}.web.ts`));
    mock.module(near(join(features, name)), () => web);
  }
}

const notOnTheTestedPath = (name: string) => () => {
  throw new Error(`${name} is a stand-in: the tested path does not call it`);
};

/** What invite/functions.ts imports besides the dial-in path, each a stand-in that is never called. */
const STAND_INS: Record<string, Record<string, unknown>> = {
  "base/conference/functions": { getRoomName: notOnTheTestedPath("getRoomName") },
  "base/connection/functions": { getInviteURL: notOnTheTestedPath("getInviteURL") },
  "base/environment/utils": { isIosMobileBrowser: notOnTheTestedPath("isIosMobileBrowser") },
  "base/i18n/i18next": { default: { t: notOnTheTestedPath("i18next.t") } },
  "base/jwt/functions": { isJwtFeatureEnabled: notOnTheTestedPath("isJwtFeatureEnabled") },
  "base/lib-jitsi-meet": { JitsiRecordingConstants: {} },
  "base/participants/functions": { getLocalParticipant: notOnTheTestedPath("getLocalParticipant") },
  "base/redux/functions": { toState: notOnTheTestedPath("toState") },
  "jaas/functions": { isVpaasMeeting: notOnTheTestedPath("isVpaasMeeting") },
  "recording/functions": { getActiveSession: notOnTheTestedPath("getActiveSession") },
};

export interface JitsiMeetRoomNames {
  /** What jitsi-meet makes of the room in a meeting URL: the MUC room name it joins. */
  getBackendSafeRoomName(room?: string): string | undefined;
}

/** base/util/uri.ts, whole: its imports are all real. */
export async function jitsiMeetRoomNames(): Promise<JitsiMeetRoomNames> {
  const features = jitsiMeetFeatures();
  await resolveForWeb(features);
  return import(join(features, "base", "util", "uri.ts"));
}

export interface JitsiMeetDialIn {
  getDialInConferenceID(
    baseUrl: string,
    roomName: string,
    mucURL: string,
    url: URL,
  ): Promise<{ conference: string | false; id: number; message: string }>;
  getDialInNumbers(url: string, roomName: string, mucURL: string): Promise<unknown>;
  _formatConferenceIDPin(conferenceID: unknown): string;
  _getDefaultPhoneNumber(numbers: unknown): string | null;
  hasMultipleNumbers(numbers: unknown): boolean;
  shouldDisplayDialIn(dialIn: unknown): boolean;
}

/** invite/_utils.ts and invite/functions.ts: the dial-in requests and how the answers are read. */
export async function jitsiMeetDialIn(): Promise<JitsiMeetDialIn> {
  const features = jitsiMeetFeatures();
  await resolveForWeb(features);
  for (const [module, exports] of Object.entries(STAND_INS)) mock.module(near(join(features, module)), () => exports);
  // functions.ts takes only jitsiLocalStorage from @jitsi/js-utils, whose index also loads a
  // postMessage transport that needs a browser window: the real submodule, without the rest.
  const localStorage = await import("@jitsi/js-utils/jitsi-local-storage");
  mock.module("@jitsi/js-utils", () => localStorage);
  const invite = join(features, "invite");
  return { ...(await import(join(invite, "_utils.ts"))), ...(await import(join(invite, "functions.ts"))) };
}
