/**
 * A private Debian Prosody 0.12 (Lua 5.4) with Jitsi's own plugins, for tests: its config,
 * data and log in a temp dir, c2s / http (BOSH + WebSocket) / component ports free on
 * loopback, run as a child process. The Parley lines of the config come from docs/jitsi.md,
 * so the documented configuration is the tested one.
 *
 * The plugins are not part of this repository: they are read, unmodified, from the folders
 * a Jitsi server installs them in (see {@link jitsiPlugins}); a test whose plugins are
 * missing is skipped with a line saying which variable to set.
 *
 * Around it, the Jitsi roles the plugins expect:
 * - {@link Focus}: Jicofo's stand-in. An external component on focus.<domain> that answers
 *   jitsi-meet's `http://jitsi.org/protocol/focus` conference IQ, plus the admin user
 *   focus@auth.<domain> that joins each room first (as owner) and leaves it when the last
 *   participant has gone, so Prosody destroys the room as it does under Jicofo.
 * - {@link JitsiClient}: a participant as jitsi-meet connects one: XMPP over WebSocket
 *   (with `?token=` for token auth), SASL ANONYMOUS, the conference IQ to the focus, then
 *   MUC presence to room@conference.<domain>/nick.
 *
 * XMPP is @xmpp/client (in-process under Bun: no Python child to drive, and the stanzas
 * are plain objects the test can inspect); the component side is a few lines over a TCP
 * socket with @xmpp/xml's parser (XEP-0114 handshake).
 *
 * With JITSI_RECORD_TRAFFIC set to a folder, every HTTP exchange the plugins have with Parley
 * passes through a recording proxy and is written there as JSON when Prosody stops
 * (test/support/jitsi-traffic.ts; the recordings under test/fixtures/jitsi-traffic/ were made so).
 */
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { client as xmppClient, xml } from "@xmpp/client";
import { type Element, Parser } from "@xmpp/xml";
import { type TrafficRecorder, recordTraffic } from "./jitsi-traffic";
import { freePort } from "./ports";

export const DOMAIN = "meet.example.com";
export const MUC_DOMAIN = `conference.${DOMAIN}`;
export const FOCUS_DOMAIN = `focus.${DOMAIN}`;
export const AUTH_DOMAIN = `auth.${DOMAIN}`;
const FOCUS_NS = "http://jitsi.org/protocol/focus";
const MUC_NS = "http://jabber.org/protocol/muc";
const MUC_USER_NS = "http://jabber.org/protocol/muc#user";
const STANZAS_NS = "urn:ietf:params:xml:ns:xmpp-stanzas";

const DOCS = join(import.meta.dir, "../../docs/jitsi.md");
/** Every wait on Prosody or a stanza is bounded by this unless a caller says otherwise. */
const WAIT_MS = 10_000;

export type ReservationsVariant = "utiljson" | "cjson";

export interface ProsodyOptions {
  /** Parley's base URL (`https://parley.example.com` in docs/jitsi.md) and the account's API key. */
  parleyUrl: string;
  apiKey: string;
  /** Which mod_reservations to load; false for none. Default: none. */
  reservations?: ReservationsVariant | false;
  /** Load the event_sync component. Default: false. */
  eventSync?: boolean;
  /**
   * `authentication = "token"` on the VirtualHost with jitsi-meet's token modules (and
   * `token_verification` on the MUC). These lines are placed as given; e.g.
   * `app_id = "parley"`, `asap_key_server = "http://127.0.0.1:N/…"`,
   * `asap_accepted_issuers = { … }`, `asap_accepted_audiences = { … }`,
   * `enable_domain_verification = true`.
   */
  tokenAuth?: { virtualHostLines: string[]; mucLines?: string[] };
  /** Extra Lua lines for the global section, the VirtualHost and the MUC component. */
  globalLines?: string[];
  virtualHostLines?: string[];
  mucLines?: string[];
}

export interface Prosody {
  dir: string;
  c2sPort: number;
  httpPort: number;
  componentPort: number;
  websocketUrl: string;
  config: string;
  /** The log so far (for failure messages). */
  log(): string;
  focus: Focus;
  /** A jitsi-meet participant, connected and authenticated (anonymous, or with the token). */
  participant(options?: { token?: string }): Promise<JitsiClient>;
  stop(): Promise<void>;
}

/** A `prosody:<name>` block of docs/jitsi.md with the test's Parley and key in it. */
export function documentedLines(name: string, parleyUrl: string, apiKey: string): string {
  const docs = readFileSync(DOCS, "utf8");
  const block = new RegExp(`<!-- prosody:${name} -->\\n\`\`\`lua\\n([\\s\\S]*?)\`\`\``).exec(docs)?.[1];
  if (block === undefined) throw new Error(`docs/jitsi.md has no prosody:${name} block`);
  return block.replaceAll("https://parley.example.com", parleyUrl).replaceAll("PARLEY_API_KEY", apiKey);
}

/**
 * Where the plugins are read from, as a Jitsi server installs them:
 * - JITSI_PROSODY_PLUGINS: jitsi-meet's plugin folder, as the `jitsi-meet-prosody` package
 *   installs it (default /usr/share/jitsi-meet/prosody-plugins): mod_reservations (the
 *   `util.json` build) and the token modules (mod_auth_token, mod_jitsi_session,
 *   mod_token_verification with luajwtjitsi.lib.lua and token/) beside util.lib.lua;
 * - JITSI_RESERVATIONS_CJSON: a folder holding a mod_reservations.lua that decodes JSON with
 *   `cjson.safe` (as Jitsi forks deploy it), with its own util.lib.lua or none (then the one
 *   of JITSI_PROSODY_PLUGINS); no default;
 * - JITSI_EVENT_SYNC: the folder of jitsi-contrib's mod_event_sync_component.lua (default:
 *   JITSI_PROSODY_PLUGINS, where operators often drop it), likewise with or without its own
 *   util.lib.lua.
 */
export function jitsiPlugins() {
  const plugins = process.env.JITSI_PROSODY_PLUGINS || "/usr/share/jitsi-meet/prosody-plugins";
  const cjson = process.env.JITSI_RESERVATIONS_CJSON || undefined;
  const eventSync = process.env.JITSI_EVENT_SYNC || plugins;
  return {
    plugins,
    reservations: { utiljson: plugins, cjson } as Record<ReservationsVariant, string | undefined>,
    eventSync,
    tokenAuth: plugins,
  };
}

type Needed = { reservations?: ReservationsVariant; eventSync?: boolean; tokenAuth?: boolean };

/**
 * What to set for a test of these plugins to run here (the variables, each with what it
 * should name and what is missing now), or undefined when every file it needs is present.
 */
export function missingPlugins(needed: Needed): string | undefined {
  const where = jitsiPlugins();
  const lacking = new Map<string, string>();
  const absent = (dir: string, files: string[]) => files.find((file) => !existsSync(join(dir, file)));
  const pluginFiles = [
    ...(needed.reservations === "utiljson" ? ["mod_reservations.lua"] : []),
    ...(needed.tokenAuth ? ["mod_auth_token.lua", "mod_token_verification.lua", "token/util.lib.lua"] : []),
    "util.lib.lua",
  ];
  const plugin = absent(where.plugins, pluginFiles);
  if (plugin)
    lacking.set("JITSI_PROSODY_PLUGINS", `jitsi-meet's Prosody plugin folder (${where.plugins} has no ${plugin})`);
  if (needed.reservations === "cjson") {
    const dir = where.reservations.cjson;
    if (!dir) lacking.set("JITSI_RESERVATIONS_CJSON", "a folder with a cjson.safe mod_reservations.lua");
    else if (absent(dir, ["mod_reservations.lua"]))
      lacking.set("JITSI_RESERVATIONS_CJSON", `a folder with a cjson.safe mod_reservations.lua (${dir} has none)`);
  }
  if (needed.eventSync && absent(where.eventSync, ["mod_event_sync_component.lua"]))
    lacking.set("JITSI_EVENT_SYNC", `the folder of mod_event_sync_component.lua (${where.eventSync} has none)`);
  return lacking.size === 0 ? undefined : [...lacking].map(([variable, what]) => `${variable} to ${what}`).join(", ");
}

/** Skips with one line when the plugins are missing: what to set, printed, and true. */
export function skipWithout(what: string, needed: Needed): boolean {
  const missing = missingPlugins(needed);
  if (missing) console.warn(`${what} skipped: set ${missing} (docs/jitsi.md, "Testing your Jitsi against Parley")`);
  return missing !== undefined;
}

/**
 * A module in its own mod_<name>/ folder with the util.lib.lua it was
 * shipped with, if any: Prosody's module:require looks there first.
 */
function moduleFolder(plugins: string, name: string, from: string) {
  const folder = join(plugins, `mod_${name}`);
  mkdirSync(folder);
  copyFileSync(join(from, `mod_${name}.lua`), join(folder, `mod_${name}.lua`));
  const util = [from, jitsiPlugins().plugins].map((dir) => join(dir, "util.lib.lua")).find((file) => existsSync(file));
  if (util) copyFileSync(util, join(folder, "util.lib.lua"));
}

/**
 * The plugin directories: a temp one with the chosen reservations and event_sync modules,
 * then jitsi-meet's folder itself, as a Jitsi server's `plugin_paths` names it (the token
 * modules load from there).
 */
function pluginPaths(dir: string, options: ProsodyOptions): string[] {
  const plugins = join(dir, "plugins");
  mkdirSync(plugins);
  const where = jitsiPlugins();
  if (options.reservations) moduleFolder(plugins, "reservations", where.reservations[options.reservations]!);
  if (options.eventSync) moduleFolder(plugins, "event_sync_component", where.eventSync);
  return [plugins, where.plugins];
}

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: "127.0.0.1" }, () => socket.end(() => resolve(true)));
    socket.on("error", () => resolve(false));
  });
}

/** Lua 5.4 module paths: Debian ships lua-basexx only for 5.1/5.2, so its own 5.2 file is added. */
function luaPath(): string {
  const basexx = ["/usr/share/lua/5.2", "/usr/share/lua/5.1"].find((dir) => existsSync(join(dir, "basexx.lua")));
  return [
    ...(basexx ? [`${basexx}/?.lua`] : []),
    "/usr/share/lua/5.4/?.lua",
    "/usr/share/lua/5.4/?/init.lua",
    ";",
  ].join(";");
}

export async function startProsody(options: ProsodyOptions): Promise<Prosody> {
  const dir = mkdtempSync(join(tmpdir(), "parley-prosody-"));
  mkdirSync(join(dir, "data"));
  const [c2sPort, httpPort, componentPort, s2sPort] = await Promise.all([
    freePort(),
    freePort(),
    freePort(),
    freePort(),
  ]);
  const focusSecret = crypto.randomUUID();
  const focusPassword = crypto.randomUUID();
  const plugins = pluginPaths(dir, options);
  // Each Prosody its own recording, named after what it loads.
  const label = [
    options.reservations && `reservations-${options.reservations}`,
    options.eventSync && "event_sync",
    options.tokenAuth && "token-auth",
  ]
    .filter(Boolean)
    .join("+");
  const recorder: TrafficRecorder | undefined = process.env.JITSI_RECORD_TRAFFIC
    ? await recordTraffic(options.parleyUrl, label)
    : undefined;
  const parleyUrl = recorder?.url ?? options.parleyUrl;
  const hostModules = [
    ...(options.reservations ? ['"reservations"'] : []),
    ...(options.tokenAuth ? ['"jitsi_session"'] : []),
  ];
  const mucModules = options.tokenAuth ? ['"token_verification"'] : [];
  const lines = (list: string[] | undefined) => (list ?? []).map((line) => `    ${line}`).join("\n");
  const config = `
-- Written by test/support/prosody.ts
run_as_root = true
daemonize = false
pidfile = "${dir}/prosody.pid"
data_path = "${dir}/data"
plugin_paths = { ${plugins.map((path) => `"${path}"`).join("; ")} }
log = { debug = "${dir}/prosody.log" }
interfaces = { "127.0.0.1" }
local_interfaces = { "127.0.0.1" }
c2s_ports = { ${c2sPort} }
c2s_interfaces = { "127.0.0.1" }
s2s_ports = { ${s2sPort} }
s2s_interfaces = { "127.0.0.1" }
http_ports = { ${httpPort} }
http_interfaces = { "127.0.0.1" }
https_ports = { }
component_ports = { ${componentPort} }
component_interface = "127.0.0.1"
modules_enabled = { "roster"; "saslauth"; "disco"; "ping"; "bosh"; "websocket" }
modules_disabled = { "s2s"; "tls" }
c2s_require_encryption = false
allow_unencrypted_plain_auth = true
consider_websocket_secure = true
consider_bosh_secure = true
cross_domain_websocket = true
cross_domain_bosh = true
admins = { "focus@${AUTH_DOMAIN}" }
muc_mapper_domain_base = "${DOMAIN}"
${(options.globalLines ?? []).join("\n")}

VirtualHost "${DOMAIN}"
    authentication = "${options.tokenAuth ? "token" : "anonymous"}"
    modules_enabled = { ${hostModules.join("; ")} }
${options.reservations ? documentedLines("reservations", parleyUrl, options.apiKey) : ""}
${lines(options.tokenAuth?.virtualHostLines.map((line) => line.replaceAll(options.parleyUrl, parleyUrl)))}
${lines(options.virtualHostLines)}

VirtualHost "${AUTH_DOMAIN}"
    authentication = "internal_hashed"

Component "${MUC_DOMAIN}" "muc"
    modules_enabled = { ${mucModules.join("; ")} }
    muc_room_locking = false
    muc_room_default_public_jids = true
    restrict_room_creation = false
${lines(options.tokenAuth?.mucLines)}
${lines(options.mucLines)}

Component "${FOCUS_DOMAIN}"
    component_secret = "${focusSecret}"

${options.eventSync ? documentedLines("event_sync", parleyUrl, options.apiKey) : ""}
`;
  const configPath = join(dir, "prosody.cfg.lua");
  writeFileSync(configPath, config);
  const env = { ...process.env, LUA_PATH_5_4: luaPath() };
  const log = () =>
    existsSync(join(dir, "prosody.log")) ? readFileSync(join(dir, "prosody.log"), "utf8") : "(no log)";

  const register = Bun.spawnSync(
    ["prosodyctl", "--config", configPath, "register", "focus", AUTH_DOMAIN, focusPassword],
    {
      env,
      stdout: "pipe",
      stderr: "pipe",
      timeout: WAIT_MS,
    },
  );
  if (register.exitCode !== 0) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`prosodyctl register failed: ${register.stdout.toString()} ${register.stderr.toString()}`);
  }
  // Everything Prosody logs goes to the file; stderr holds only what breaks before logging starts.
  const child = Bun.spawn(["prosody", "--config", configPath, "-F"], { env, stdout: "ignore", stderr: "pipe" });
  // Last resort when a test run ends without stop() (a failed beforeAll, a timeout): no orphan Prosody.
  const killOnExit = () => child.kill("SIGKILL");
  process.once("exit", killOnExit);
  const stop = async () => {
    process.off("exit", killOnExit);
    child.kill("SIGTERM");
    const exited = await Promise.race([child.exited.then(() => true), Bun.sleep(3_000).then(() => false)]);
    if (!exited) child.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
    await recorder?.stop(options.apiKey);
  };
  const up = async () => (await listening(httpPort)) && (await listening(componentPort)) && (await listening(c2sPort));
  let ready = false;
  for (const deadline = Date.now() + WAIT_MS; !ready && Date.now() < deadline && child.exitCode === null; ) {
    ready = await up();
    if (!ready) await Bun.sleep(50);
  }
  if (!ready) {
    const text = log();
    const exited = child.exitCode !== null;
    await stop();
    const stderr = exited ? await new Response(child.stderr).text() : "";
    throw new Error(`Prosody did not come up (exit ${child.exitCode}):\n${stderr}${text.slice(-4000)}`);
  }
  const websocketUrl = `ws://127.0.0.1:${httpPort}/xmpp-websocket`;
  let focus: Focus;
  try {
    focus = await Focus.start({ componentPort, secret: focusSecret, websocketUrl, password: focusPassword });
  } catch (error) {
    const text = log();
    await stop();
    throw new Error(`focus did not connect: ${error}\n${text.slice(-4000)}`);
  }
  const participants: JitsiClient[] = [];
  return {
    dir,
    c2sPort,
    httpPort,
    componentPort,
    websocketUrl,
    config,
    log,
    focus,
    async participant(participantOptions = {}) {
      const client = await JitsiClient.connect(websocketUrl, participantOptions.token);
      participants.push(client);
      return client;
    },
    async stop() {
      await Promise.all(participants.map((participant) => participant.close()));
      await focus.close();
      await stop();
    },
  };
}

/** Resolves with the first stanza `match` accepts, or rejects after `ms`. */
function waitFor<T>(
  subscribe: (handler: (stanza: Element) => void) => () => void,
  match: (stanza: Element) => T | undefined,
  ms: number,
  what: string,
): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      unsubscribe();
      reject(new Error(`timed out after ${ms} ms waiting for ${what}`));
    }, ms);
    const unsubscribe = subscribe((stanza) => {
      const found = match(stanza);
      if (found === undefined) return;
      clearTimeout(timer);
      unsubscribe();
      resolve(found);
    });
  });
}

type Entity = ReturnType<typeof xmppClient>;

function subscriber(entity: Entity) {
  return (handler: (stanza: Element) => void) => {
    entity.on("stanza", handler);
    return () => entity.off("stanza", handler);
  };
}

const bare = (jid: string) => jid.split("/")[0]!;
const isSelfPresence = (stanza: Element) =>
  stanza
    .getChild("x", MUC_USER_NS)
    ?.getChildren("status")
    .some((status: Element) => status.attrs.code === "110") ?? false;

/** Joins room@muc as nick and waits for the self-presence (or the error). */
async function joinMuc(
  entity: Entity,
  roomJid: string,
  nick: string,
): Promise<{ ok: true } | { ok: false; condition: string }> {
  const to = `${roomJid}/${nick}`;
  const answer = waitFor(
    subscriber(entity),
    (stanza) => {
      if (stanza.name !== "presence" || stanza.attrs.from !== to) return undefined;
      if (stanza.attrs.type === "error")
        return { ok: false as const, condition: stanza.getChild("error")?.children[0]?.toString() ?? "error" };
      return isSelfPresence(stanza) ? { ok: true as const } : undefined;
    },
    WAIT_MS,
    `join of ${to}`,
  );
  await entity.send(xml("presence", { to }, xml("x", { xmlns: MUC_NS })));
  return answer;
}

async function leaveMuc(entity: Entity, roomJid: string, nick: string) {
  const to = `${roomJid}/${nick}`;
  const left = waitFor(
    subscriber(entity),
    (stanza) =>
      stanza.name === "presence" && stanza.attrs.from === to && stanza.attrs.type === "unavailable" ? true : undefined,
    WAIT_MS,
    `leave of ${to}`,
  );
  await entity.send(xml("presence", { to, type: "unavailable" }));
  await left;
}

async function connectClient(options: Parameters<typeof xmppClient>[0]): Promise<Entity> {
  const entity = xmppClient(options);
  entity.on("error", () => {});
  // The reconnect plugin would retry forever after a refused login; tests want the refusal.
  (entity as unknown as { reconnect?: { stop(): void } }).reconnect?.stop();
  const online = new Promise<void>((resolve, reject) => {
    entity.once("online", () => resolve());
    entity.once("error", reject);
  });
  // start() rejects with the same error; this copy must not surface as unhandled.
  online.catch(() => {});
  await Promise.race([
    entity.start().then(() => online),
    Bun.sleep(WAIT_MS).then(() => {
      throw new Error(`XMPP connection to ${options?.service} timed out`);
    }),
  ]);
  return entity;
}

async function closeClient(entity: Entity) {
  await Promise.race([entity.stop().catch(() => {}), Bun.sleep(2_000)]);
}

/** Jicofo's stand-in: the focus component and the focus admin user. */
export class Focus {
  /** Conference IQs received, in order: the room JID asked for and the sender. */
  readonly requests: Array<{ room: string; from: string }> = [];
  private readonly occupants = new Map<string, Set<string>>();
  private constructor(
    private readonly component: Socket,
    private readonly user: Entity,
  ) {}

  static async start(options: {
    componentPort: number;
    secret: string;
    websocketUrl: string;
    password: string;
  }): Promise<Focus> {
    const user = await connectClient({
      service: options.websocketUrl,
      domain: AUTH_DOMAIN,
      username: "focus",
      password: options.password,
      resource: "focus",
    });
    await user.send(xml("presence"));
    const component = connect({ port: options.componentPort, host: "127.0.0.1" });
    const parser = new Parser();
    component.on("data", (data) => parser.write(data.toString("utf8")));
    const focus = new Focus(component, user);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("component handshake timed out")), WAIT_MS);
      parser.on("start", (header: Element) => {
        const digest = createHash("sha1").update(`${header.attrs.id}${options.secret}`).digest("hex");
        component.write(`<handshake>${digest}</handshake>`);
      });
      parser.on("element", (stanza: Element) => {
        if (stanza.name === "handshake") {
          clearTimeout(timer);
          resolve();
        } else if (stanza.name === "iq") void focus.answer(stanza);
      });
      parser.on("error", reject);
      component.on("error", reject);
      component.write(
        "<?xml version='1.0'?><stream:stream xmlns='jabber:component:accept' " +
          `xmlns:stream='http://etherx.jabber.org/streams' to='${FOCUS_DOMAIN}'>`,
      );
    });
    user.on("stanza", (stanza: Element) => focus.track(stanza));
    return focus;
  }

  /** The conference IQ: join the room first (creating it), then tell the participant it is ready. */
  private async answer(iq: Element) {
    const conference = iq.getChild("conference", FOCUS_NS);
    const reply = (attrs: Record<string, string>, child?: Element) =>
      this.component.write(
        xml("iq", { ...attrs, from: iq.attrs.to, to: iq.attrs.from, id: iq.attrs.id }, child).toString(),
      );
    if (iq.attrs.type !== "set" || !conference) {
      if (iq.attrs.type === "get" || iq.attrs.type === "set")
        reply({ type: "error" }, xml("error", { type: "cancel" }, xml("service-unavailable", { xmlns: STANZAS_NS })));
      return;
    }
    const room = conference.attrs.room as string;
    this.requests.push({ room, from: iq.attrs.from });
    if (!this.occupants.has(room)) {
      const joined = await joinMuc(this.user, room, "focus").catch((error) => ({
        ok: false as const,
        condition: String(error),
      }));
      if (!joined.ok) {
        reply({ type: "error" }, xml("error", { type: "cancel" }, xml("internal-server-error", { xmlns: STANZAS_NS })));
        return;
      }
      this.occupants.set(room, new Set());
    }
    reply(
      { type: "result" },
      xml("conference", { xmlns: FOCUS_NS, room, ready: "true", focusjid: `focus@${AUTH_DOMAIN}` }),
    );
  }

  /** Leaves a room once its last participant has gone, so Prosody destroys it as under Jicofo. */
  private track(stanza: Element) {
    if (stanza.name !== "presence" || !stanza.attrs.from) return;
    const [room, nick] = [bare(stanza.attrs.from), stanza.attrs.from.split("/")[1] ?? ""];
    const present = this.occupants.get(room);
    if (!present) return;
    if (nick === "focus") {
      if (stanza.attrs.type === "unavailable") this.occupants.delete(room);
      return;
    }
    if (stanza.attrs.type === "unavailable") {
      present.delete(nick);
      if (present.size === 0) {
        this.occupants.delete(room);
        // Fails only when the focus is closing down, with the test.
        this.user.send(xml("presence", { to: `${room}/focus`, type: "unavailable" })).catch(() => {});
      }
    } else if (!stanza.attrs.type) present.add(nick);
  }

  /** Rooms the focus is in now. */
  rooms(): string[] {
    return [...this.occupants.keys()];
  }

  async close() {
    await closeClient(this.user);
    this.component.end("</stream:stream>");
    this.component.destroy();
  }
}

export type OpenResult =
  | { ok: true }
  /** The conference IQ was refused: mod_reservations' `reservation-error` code and text. */
  | { ok: false; stage: "focus"; code: number | undefined; text: string }
  | { ok: false; stage: "muc"; condition: string };

/** A participant as jitsi-meet connects one. */
export class JitsiClient {
  private readonly rooms = new Map<string, string>();
  /** Room JIDs whose destruction (or this occupant's removal) Prosody announced. */
  readonly destroyed: string[] = [];
  private constructor(readonly entity: Entity) {
    entity.on("stanza", (stanza: Element) => {
      if (stanza.name !== "presence" || stanza.attrs.type !== "unavailable" || !isSelfPresence(stanza)) return;
      const room = bare(stanza.attrs.from);
      if (this.rooms.has(room)) {
        this.rooms.delete(room);
        this.destroyed.push(room);
      }
    });
  }

  static async connect(websocketUrl: string, token?: string): Promise<JitsiClient> {
    const service = token ? `${websocketUrl}?token=${encodeURIComponent(token)}` : websocketUrl;
    return new JitsiClient(await connectClient({ service, domain: DOMAIN }));
  }

  get jid(): string {
    return this.entity.jid?.toString() ?? "";
  }

  /**
   * Opens the room as jitsi-meet does: the conference IQ to the focus (what
   * mod_reservations intercepts), then the MUC join. `room` is the MUC room name (the node).
   */
  async open(room: string, nick = crypto.randomUUID().slice(0, 8), waitMs = WAIT_MS): Promise<OpenResult> {
    const roomJid = `${room}@${MUC_DOMAIN}`;
    const id = crypto.randomUUID();
    const answer = waitFor(
      subscriber(this.entity),
      (stanza) => (stanza.name === "iq" && stanza.attrs.id === id ? stanza : undefined),
      waitMs,
      `the conference IQ answer for ${roomJid}`,
    );
    await this.entity.send(
      xml(
        "iq",
        { type: "set", to: FOCUS_DOMAIN, id },
        xml(
          "conference",
          { xmlns: FOCUS_NS, room: roomJid, "machine-uid": crypto.randomUUID() },
          xml("property", { name: "rtcstatsEnabled", value: "false" }),
          xml("property", { name: "visitors-version", value: "1" }),
        ),
      ),
    );
    const iq = await answer;
    if (iq.attrs.type === "error") {
      const error = iq.getChild("error");
      const code = error?.getChild("reservation-error", FOCUS_NS)?.attrs["error-code"];
      return {
        ok: false,
        stage: "focus",
        code: code === undefined ? undefined : Number(code),
        text: error?.getChildText("text", STANZAS_NS) ?? "",
      };
    }
    const joined = await joinMuc(this.entity, roomJid, nick);
    if (!joined.ok) return { ok: false, stage: "muc", condition: joined.condition };
    this.rooms.set(roomJid, nick);
    return { ok: true };
  }

  async leave(room: string) {
    const roomJid = `${room}@${MUC_DOMAIN}`;
    const nick = this.rooms.get(roomJid);
    if (nick === undefined) throw new Error(`not in ${roomJid}`);
    this.rooms.delete(roomJid);
    await leaveMuc(this.entity, roomJid, nick);
  }

  async close() {
    await closeClient(this.entity);
  }
}
