/**
 * Keeps README.md and docs/ true: every relative link resolves, the configuration page and
 * src/core/config.ts name the same variables, and the pages' curl examples, run with the real
 * curl against a real Parley started as `npm start` would (embedded database, fresh data
 * folder, the bootstrap account's key in data/first-api-key, only the settings the pages
 * give), answer as the pages say, through Prism's validating proxy, which fails any answer the
 * served OpenAPI description does not declare; every page's `npm run parley` blocks run against
 * it as printed, from a checkout beside it (npm itself for the first, then the script npm runs);
 * docs/sdk.md's JavaScript examples run on Node with the SDK installed from its tarball, its
 * webhook receiver verifying a real delivery. No page shows a command that begins with a bare
 * `bun`, which a fresh machine does not have on its PATH. docs/architecture.md lists the roles of
 * src/process/roles.ts and every module folder.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, posix, resolve } from "node:path";
import { loadConfig } from "../src/core/config";
import { ROLES } from "../src/process/roles";
import { connect, disconnect, join as joinChannel, push } from "./support/phoenix";
import { type Parley, startParley, within } from "./support/parley";
import { freePort } from "./support/ports";
import { installedSdk, NODE_ONLY_PATH } from "./support/sdk-package";
import { startValidatingProxy, type ValidatingProxy } from "./support/validating-proxy";

const ROOT = resolve(import.meta.dir, "..");

/** Pages other work adds; the front page and the feature pages link to them ahead of time. */
const PAGES_TO_COME = new Set(["docs/fault-injection.md", "docs/limits.md", "docs/jitsi.md"]);

/**
 * Fields of a shown answer whose value Parley makes up (a stream's name, a record's id):
 * later commands on the page use the real value where the page wrote the shown one (an id
 * only as a whole path segment or query value, `/3` or `=3`).
 */
const GENERATED_FIELDS = ["stream_name", "id"];

function replaceGenerated(text: string, shown: string | number, real: string | number): string {
  if (typeof shown === "string") return text.replaceAll(shown, String(real));
  return text.replace(new RegExp(`(?<=[/=])${shown}(?![\\w.-])`, "g"), String(real));
}

/**
 * The recorder the streaming examples start: the command driver running a shell that
 * says it publishes. Media output is proven against nginx-rtmp in test/workers/recorder.test.ts.
 */
const RECORDER_COMMAND = "echo ready; exec sleep 60";

/** README.md and every page under docs/, as repository paths. */
function pages(): string[] {
  const docs = readdirSync(join(ROOT, "docs"))
    .filter((name) => name.endsWith(".md"))
    .sort()
    .map((name) => `docs/${name}`);
  return ["README.md", ...docs];
}

function read(page: string): string {
  return readFileSync(join(ROOT, page), "utf8");
}

/** Files git knows (tracked, or new and not ignored), so a link to an ignored or local-only file fails. */
function repositoryFiles(): Set<string> {
  const listed = Bun.spawnSync(["git", "ls-files", "--cached", "--others", "--exclude-standard"], { cwd: ROOT });
  if (listed.exitCode !== 0) throw new Error(`git ls-files failed: ${listed.stderr.toString()}`);
  return new Set(listed.stdout.toString().split("\n").filter(Boolean));
}

interface Fence {
  info: string;
  body: string;
}

/** Splits a page into prose (fences blanked out) and its fenced code blocks. */
function parse(markdown: string): { prose: string[]; fences: Fence[] } {
  const prose: string[] = [];
  const fences: Fence[] = [];
  let open: Fence | undefined;
  for (const line of markdown.split("\n")) {
    const fence = /^\s*```(.*)$/.exec(line);
    if (fence) {
      if (open) {
        fences.push(open);
        open = undefined;
      } else {
        open = { info: fence[1]!.trim(), body: "" };
      }
      prose.push("");
    } else if (open) {
      open.body += `${line}\n`;
      prose.push("");
    } else {
      prose.push(line);
    }
  }
  return { prose, fences };
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");
}

function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const found = new Set<string>();
  for (const line of parse(markdown).prose) {
    const heading = /^#{1,6}\s+(.*)$/.exec(line);
    if (!heading) continue;
    const base = slug(heading[1]!);
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    found.add(count === 0 ? base : `${base}-${count}`);
  }
  return found;
}

/** Targets of the page's Markdown links, outside code. */
function links(markdown: string): string[] {
  const targets: string[] = [];
  for (const line of parse(markdown).prose) {
    const withoutCode = line.replace(/`[^`]*`/g, "");
    for (const match of withoutCode.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) targets.push(match[1]!);
  }
  return targets;
}

describe("links", () => {
  test("every relative link of README.md and docs/ points at a file and heading that exist", () => {
    const files = repositoryFiles();
    const problems: string[] = [];
    for (const page of pages()) {
      for (const target of links(read(page))) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
        const [pathPart = "", anchor] = target.split("#", 2);
        const path =
          pathPart === "" ? page : posix.normalize(posix.join(posix.dirname(page), pathPart)).replace(/\/$/, "");
        const isFile = files.has(path);
        const isFolder = [...files].some((file) => file.startsWith(`${path}/`));
        if (!isFile && !isFolder) {
          if (!PAGES_TO_COME.has(path)) problems.push(`${page}: ${target} (no ${path})`);
          continue;
        }
        if (anchor !== undefined && path.endsWith(".md") && !anchors(read(path)).has(anchor)) {
          problems.push(`${page}: ${target} (no heading #${anchor} in ${path})`);
        }
      }
    }
    expect(problems).toEqual([]);
  });
});

/**
 * The names in backticks that begin the table rows of a page's
 * section (to its next heading of the same level or above).
 */
function tableNames(page: string, heading: string): string[] {
  const lines = read(page).split("\n");
  const start = lines.indexOf(heading);
  if (start < 0) throw new Error(`${page} has no heading "${heading}"`);
  const level = heading.indexOf(" ");
  const names: string[] = [];
  for (const line of lines.slice(start + 1)) {
    const next = /^(#+) /.exec(line);
    if (next && next[1]!.length <= level) break;
    const row = /^\| `([^`]+)` \|/.exec(line);
    if (row) names.push(row[1]!);
  }
  return names;
}

describe("architecture", () => {
  test("docs/architecture.md lists the roles of src/process/roles.ts, no more and no fewer", () => {
    expect(tableNames("docs/architecture.md", "## Roles").sort()).toEqual(Object.keys(ROLES).sort());
  });

  test("docs/architecture.md names every module folder under src/modules, and no other", () => {
    const folders = readdirSync(join(ROOT, "src/modules"), { withFileTypes: true })
      .filter((entry) => entry.isDirectory())
      .map((entry) => entry.name)
      .sort();
    expect(tableNames("docs/architecture.md", "### Modules").sort()).toEqual(folders);
  });
});

/** Commands in inline code and in shell blocks that begin with `bun` (after a pipe or `&&` too). */
function bareBunCommands(markdown: string): string[] {
  const { prose, fences } = parse(markdown);
  const startsWithBun = /(^|[|;&]\s*|^\$\s+)bun\s/;
  const inline = prose
    .flatMap((line) => [...line.matchAll(/`([^`]+)`/g)].map((match) => match[1]!))
    .filter((code) => startsWithBun.test(code.trim()));
  const shown = fences
    .filter((fence) => /^(sh|bash|shell|text|)$/.test(fence.info))
    .flatMap((fence) => fence.body.split("\n").filter((line) => startsWithBun.test(line.trim())));
  return [...inline, ...shown];
}

describe("commands", () => {
  test("no page shows a command beginning with a bare bun (not on PATH on a fresh machine)", () => {
    const found = pages().flatMap((page) => bareBunCommands(read(page)).map((command) => `${page}: ${command}`));
    expect(found).toEqual([]);
    // The check finds what it looks for.
    expect(bareBunCommands("Run `bun src/index.ts` or\n```sh\necho x | bun run admin list\n```\n")).toHaveLength(2);
  });

  test("a page runs a file of the repository with `npx bun`, never bare `bun` (not on a fresh machine's PATH)", () => {
    const files = repositoryFiles();
    const problems: string[] = [];
    for (const page of pages()) {
      const { prose, fences } = parse(read(page));
      const shown = [
        ...prose.flatMap((line) => [...line.matchAll(/`([^`]*)`/g)].map((match) => match[1]!)),
        ...fences.flatMap((fence) => fence.body.split("\n")),
      ];
      for (const command of shown) {
        const bare = /(?:^|[\s;&|(])bun\s+(?:--?[\w-]+\s+)*([\w./-]+)/.exec(command);
        if (bare && files.has(bare[1]!) && !/npx\s+bun\s/.test(command)) problems.push(`${page}: ${command.trim()}`);
      }
    }
    expect(problems).toEqual([]);
  });
});

test("the tarball docs/sdk.md packs is one git ignores, wherever npm pack puts it", () => {
  const block = parse(read("docs/sdk.md")).fences.find((fence) => fence.body.includes("npm pack"))!;
  const packed = /#\s*(\S+\.tgz)/.exec(block.body)![1]!;
  for (const place of [packed, packed.split("/").pop()!]) {
    const ignored = Bun.spawnSync(["git", "check-ignore", "-q", place], { cwd: ROOT });
    expect({ place, ignored: ignored.exitCode === 0 }).toEqual({ place, ignored: true });
  }
});

describe("configuration", () => {
  /** Names read by loadConfig, watched through the environment it is given, plus names written in the source. */
  function variablesRead(): Set<string> {
    const read = new Set<string>();
    const watched = new Proxy({} as Record<string, string | undefined>, {
      get(_, name) {
        if (typeof name === "string") read.add(name);
        return undefined;
      },
    });
    loadConfig(watched);
    // A variable read only on some path (after a condition) still appears in the source.
    const source = readFileSync(join(ROOT, "src/core/config.ts"), "utf8");
    for (const match of source.matchAll(/(?:\(\s*(?:env\s*,\s*)?|env\[\s*)"([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*)"/g))
      read.add(match[1]!);
    for (const match of source.matchAll(/\benv\.([A-Z][A-Z0-9_]*)/g)) read.add(match[1]!);
    return read;
  }

  /** Variables named in the first column of the tables of docs/configuration.md. */
  function variablesDocumented(): Set<string> {
    const documented = new Set<string>();
    for (const line of parse(read("docs/configuration.md")).prose) {
      const row = /^\|([^|]*)\|/.exec(line);
      if (!row) continue;
      for (const name of row[1]!.matchAll(/`([A-Z][A-Z0-9_]*)`/g)) documented.add(name[1]!);
    }
    return documented;
  }

  /**
   * Rows of the configuration table whose default is a plain value (not "—", "CPU count" or a formula), per variable.
   */
  function plainDefaults(): Array<Record<string, string>> {
    const rows: Array<Record<string, string>> = [];
    for (const line of parse(read("docs/configuration.md")).prose) {
      const cells = line.split("|").map((cell) => cell.trim());
      if (cells.length < 4 || !cells[1]!.startsWith("`")) continue;
      const names = [...cells[1]!.matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map((match) => match[1]!);
      const values = cells[2]!.replaceAll("`", "").split(/,\s+/);
      if (values.length !== names.length || values.some((value) => !/^[^\s$<>(—]+$/.test(value))) continue;
      rows.push(Object.fromEntries(names.map((name, index) => [name, values[index]!])));
    }
    return rows;
  }

  test("every plain default in docs/configuration.md is the default src/core/config.ts uses", () => {
    // Whether REDIS_URL was given at all decides if `npm start` may run a private Redis, so it differs by design.
    const settled = (env: Record<string, string>) => {
      const loaded = loadConfig(env);
      return { ...loaded, redis: { ...loaded.redis, explicit: undefined } };
    };
    const defaults = settled({});
    const rows = plainDefaults();
    expect(rows.length).toBeGreaterThan(40);
    const wrong = rows.filter((row) => !Bun.deepEquals(settled(row), defaults)).map((row) => JSON.stringify(row));
    expect(wrong).toEqual([]);
  });

  test("docs/configuration.md documents every variable src/core/config.ts reads, and no other", () => {
    const read = variablesRead();
    const documented = variablesDocumented();
    expect(read.size).toBeGreaterThan(50);
    expect({ undocumented: [...read].filter((name) => !documented.has(name)).sort() }).toEqual({ undocumented: [] });
    expect({ documentedButNotRead: [...documented].filter((name) => !read.has(name)).sort() }).toEqual({
      documentedButNotRead: [],
    });
  });
});

interface Command {
  code: string;
  hasCurl: boolean;
  /** The answer the page shows for this command, as written after it. */
  answer?: { status?: number; text: string };
}

/**
 * Splits a shell block into commands as bash would (a newline outside quotes ends one, a
 * trailing backslash continues it), and gives each curl command the answer the page
 * prints in a comment after it (`# {...}`, `# 201 {...}`, continued by `#  ` lines).
 */
function commands(block: string): Command[] {
  const found: Command[] = [];
  let current: Command = { code: "", hasCurl: false };
  let lastCurl: Command | undefined;
  let openAnswer: Command | undefined;
  let quote: "'" | '"' | undefined;
  const finish = () => {
    current.code = current.code.trim();
    current.hasCurl = /(^|[\s(|;&])curl\s/.test(current.code);
    if (current.code !== "") {
      found.push(current);
      if (current.hasCurl) lastCurl = current;
      openAnswer = undefined;
    }
    current = { code: "", hasCurl: false };
  };
  for (let i = 0; i < block.length; i++) {
    const c = block[i]!;
    if (quote === "'") {
      current.code += c;
      if (c === "'") quote = undefined;
      continue;
    }
    if (quote === '"') {
      current.code += c;
      if (c === "\\") current.code += block[++i] ?? "";
      else if (c === '"') quote = undefined;
      continue;
    }
    if (c === "\\") {
      const next = block[++i] ?? "";
      current.code += next === "\n" ? " " : c + next;
      continue;
    }
    if (c === "'" || c === '"') {
      quote = c;
      current.code += c;
      continue;
    }
    if (c === "#" && (current.code === "" || /\s$/.test(current.code))) {
      const end = block.indexOf("\n", i) === -1 ? block.length : block.indexOf("\n", i);
      const comment = block.slice(i + 1, end);
      i = end - 1;
      const target = /(^|[\s(|;&])curl\s/.test(current.code) ? current : lastCurl;
      if (openAnswer?.answer && current.code.trim() === "" && /^ {2}/.test(comment)) {
        openAnswer.answer.text += ` ${comment.trim()}`;
      } else if (target && /^\s*(\d{3}\s+)?[[{]/.test(comment)) {
        const [, status, text] = /^\s*(?:(\d{3})\s+)?(.*)$/s.exec(comment)!;
        target.answer = { status: status === undefined ? undefined : Number(status), text: text!.trim() };
        openAnswer = target;
      } else {
        openAnswer = undefined;
      }
      continue;
    }
    if (c === "\n") {
      finish();
      continue;
    }
    current.code += c;
  }
  finish();
  return found;
}

/** Where an answer differs in shape from the one a page shows: keys, types, and array items. */
function shapeProblems(shown: unknown, actual: unknown, path = "answer"): string[] {
  if (shown === null || actual === null) return [];
  if (Array.isArray(shown)) {
    if (!Array.isArray(actual)) return [`${path}: an array in the page, ${JSON.stringify(actual)} in the answer`];
    if (shown.length === 0) return [];
    return actual.flatMap((item, index) => shapeProblems(shown[0], item, `${path}[${index}]`));
  }
  if (typeof shown === "object") {
    if (typeof actual !== "object" || Array.isArray(actual))
      return [`${path}: an object in the page, ${JSON.stringify(actual)} in the answer`];
    const shownKeys = Object.keys(shown as object);
    // `{...}` in a page stands for any object.
    if (shownKeys.length === 0) return [];
    const actualKeys = Object.keys(actual as object);
    const problems = [
      ...shownKeys
        .filter((key) => !actualKeys.includes(key))
        .map((key) => `${path}.${key}: in the page, missing from the answer`),
      ...actualKeys
        .filter((key) => !shownKeys.includes(key))
        .map((key) => `${path}.${key}: in the answer, missing from the page`),
    ];
    for (const key of shownKeys) {
      if (actualKeys.includes(key))
        problems.push(...shapeProblems((shown as any)[key], (actual as any)[key], `${path}.${key}`));
    }
    return problems;
  }
  return typeof shown === typeof actual
    ? []
    : [`${path}: a ${typeof shown} in the page, ${JSON.stringify(actual)} in the answer`];
}

/**
 * One bash that runs a page's commands in order, so variables carry from one to the next, as in a reader's terminal.
 */
class Shell {
  private readonly process;
  private readonly reader;
  private readonly decoder = new TextDecoder();
  private buffer = "";
  private readonly marker = `__docs_${crypto.randomUUID().replaceAll("-", "")}__`;

  constructor(cwd: string, env: Record<string, string>) {
    this.process = Bun.spawn(["bash", "--noprofile", "--norc"], {
      cwd,
      env,
      stdin: "pipe",
      stdout: "pipe",
      stderr: "ignore",
    });
    this.reader = this.process.stdout.getReader();
  }

  /** Runs one command and resolves with what it printed. */
  async run(code: string, timeoutMs = 20_000): Promise<string> {
    this.process.stdin.write(`${code}\nprintf '\\n${this.marker}\\n'\n`);
    this.process.stdin.flush();
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const at = this.buffer.indexOf(`\n${this.marker}\n`);
      if (at !== -1) {
        const output = this.buffer.slice(0, at);
        this.buffer = this.buffer.slice(at + this.marker.length + 2);
        return output;
      }
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`command did not finish within ${timeoutMs} ms: ${code}`);
      let giveUp: (value: undefined) => void = () => {};
      const late = new Promise<undefined>((resolve) => {
        giveUp = resolve;
      });
      const timer = setTimeout(() => giveUp(undefined), left);
      const chunk = await Promise.race([this.reader.read(), late]);
      clearTimeout(timer);
      if (chunk === undefined) continue;
      if (chunk.done) throw new Error(`bash ended while running: ${code}`);
      this.buffer += this.decoder.decode(chunk.value, { stream: true });
    }
  }

  async value(name: string): Promise<string> {
    return (await this.run(`printf '%s' "$${name}"`)).trim();
  }

  async close(): Promise<void> {
    this.process.stdin.end();
    const exited = await Promise.race([this.process.exited.then(() => true), Bun.sleep(2_000).then(() => false)]);
    if (!exited) this.process.kill("SIGKILL");
  }
}

/** Every call of the real curl, logged by a wrapper the page's commands call instead. */
const CURL_WRAPPER = `
curl() {
  local n; n=$(( $(cat "$DOC_CURL_LOG/count") + 1 )); echo "$n" > "$DOC_CURL_LOG/count"
  command curl --max-time 10 -o "$DOC_CURL_LOG/$n.body" -D "$DOC_CURL_LOG/$n.headers" -w '%{http_code}' "$@" \
    > "$DOC_CURL_LOG/$n.status"
  local rc=$?
  cat "$DOC_CURL_LOG/$n.body" 2>/dev/null
  return $rc
}`;

/** The headers curl wrote with -D (of the last answer, when it followed a redirect). */
function curlHeaders(file: string): Headers {
  const headers = new Headers();
  if (!existsSync(file)) return headers;
  for (const line of readFileSync(file, "utf8").split("\r\n")) {
    if (line.startsWith("HTTP/")) for (const name of [...headers.keys()]) headers.delete(name);
    const colon = line.indexOf(":");
    if (colon > 0) headers.append(line.slice(0, colon), line.slice(colon + 1).trim());
  }
  return headers;
}

/**
 * Settings the pages tell a reader to start Parley with (`NAME=value npm start` in a code
 * block): the Parley the examples run against gets them, and only them, as the reader's would.
 */
function startSettings(): Record<string, string> {
  const settings: Record<string, string> = {};
  for (const page of pages()) {
    for (const fence of parse(read(page)).fences) {
      for (const line of fence.body.split("\n")) {
        const start = /^((?:[A-Z][A-Z0-9_]*=\S+\s+)+)npm start\s*$/.exec(line.trim());
        if (!start) continue;
        for (const assignment of start[1]!.trim().split(/\s+/)) {
          const [name, value] = assignment.split("=", 2) as [string, string];
          if (settings[name] !== undefined && settings[name] !== value)
            throw new Error(`${page}: ${name}=${value}, another page starts with ${settings[name]}`);
          settings[name] = value;
        }
      }
    }
  }
  return settings;
}

describe("curl examples against a running Parley", () => {
  let workspace: string;
  let parley: Parley | undefined;
  let proxy: ValidatingProxy | undefined;
  let base: string;
  let port: number;
  let apiKey: string;
  let accountId: string;
  let platformToken: string;

  beforeAll(async () => {
    workspace = mkdtempSync(join(tmpdir(), "parley-docs-"));
    // A checkout of its own: the repository's files, and the data folder and whatever the pages write kept apart.
    for (const entry of readdirSync(ROOT))
      if (![".git", "data", "dist"].includes(entry)) symlinkSync(join(ROOT, entry), join(workspace, entry));
    // `npm start` on embedded defaults: no DATABASE_URL, a fresh data folder, the bootstrap account.
    // Free ports and the test Redis aside, only what the pages set, and the recorder that stands in for a media server.
    parley = await startParley({
      embedded: true,
      asReader: true,
      dataDir: join(workspace, "data"),
      env: {
        STREAMING_RECORDER_DRIVER: "command",
        STREAMING_RECORDER_COMMAND: RECORDER_COMMAND,
        ...startSettings(),
      },
    });
    ({ base, port } = parley);
    // Responses only: pages show requests that are wrong on purpose, and the answers Parley gives them.
    proxy = await startValidatingProxy(base, { validateRequests: false });
    apiKey = await parley.firstApiKey();
    const issue = async (scope: string) => {
      const answer = await fetch(`${base}/api/v1/misc/generate-token`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ apiKey, scope }),
      });
      return ((await answer.json()) as { token: string }).token;
    };
    platformToken = await issue("parley");
    accountId = JSON.parse(Buffer.from(platformToken.split(".")[1]!, "base64url").toString()).sub;
  }, 70_000);

  afterAll(async () => {
    await proxy?.stop();
    await parley?.close();
    if (workspace) rmSync(workspace, { recursive: true, force: true });
  });

  /** Commands a page shows with values only a peer could give; the hook runs the peer and says what to run instead. */
  const hooks: Array<{ page: string; startsWith: string; run: (shell: Shell) => Promise<string> }> = [
    {
      // Chat messages are posted over the socket: post them with the phoenix client, as the page says.
      page: "docs/chat.md",
      startsWith: "MESSAGE_ID=",
      async run(shell) {
        const socket = connect(`ws://127.0.0.1:${port}`, await shell.value("T"));
        try {
          const room = socket.channel("chat:general");
          await joinChannel(room);
          const message = await push(room, "new_message", { content: "hello" });
          const poll = await push(room, "new_message", {
            content: "Lunch?",
            content_type: "poll",
            options: ["pizza", "sushi"],
          });
          if (message.status !== "ok" || poll.status !== "ok")
            throw new Error(`posting over the socket failed: ${JSON.stringify([message, poll])}`);
          return (
            `MESSAGE_ID=${message.response.message.id} POLL_ID=${poll.response.message.id} ` +
            `OPTION_ID=${poll.response.message.options[1].id}`
          );
        } finally {
          await disconnect(socket);
        }
      },
    },
  ];

  // Not curl, and not run here: the sipp calls of docs/sip.md need a SIP gateway with a
  // trunk at gw.example.com; test/sip-gateway/gateway.test.ts runs those scenarios.
  test.skip("docs/sip.md: the sipp examples (a SIP peer; test/sip-gateway/gateway.test.ts runs them)", () => {});

  for (const page of pages()) {
    const blocks = parse(read(page)).fences.filter(
      (fence) => /^(sh|bash|shell)$/.test(fence.info) && /\bcurl\s/.test(fence.body),
    );
    if (blocks.length === 0) continue;
    test(`${page}: curl examples answer below 500 (or the 5xx it shows), in the shape the page shows`, async () => {
      const log = mkdtempSync(join(tmpdir(), "parley-docs-curl-"));
      writeFileSync(join(log, "count"), "0");
      const shell = new Shell(workspace, {
        PATH: process.env.PATH ?? "/usr/bin:/bin",
        HOME: workspace,
        DOC_CURL_LOG: log,
        KEY: apiKey,
        PLATFORM_TOKEN: platformToken,
      });
      const problems: string[] = [];
      const generated = new Map<string | number, string | number>();
      const withGenerated = (text: string) =>
        [...generated].reduce((result, [shown, real]) => replaceGenerated(result, shown, real), text);
      let calls = 0;
      try {
        await shell.run(CURL_WRAPPER);
        for (const block of blocks) {
          for (const command of commands(block.body)) {
            const hook = hooks.find(
              (candidate) => candidate.page === page && command.code.startsWith(candidate.startsWith),
            );
            // Prism's proxy answers with a mock of its own where the server answers 501, so an example
            // that shows a 501 (not_configured) goes to Parley directly; test/contract checks it is declared.
            const target = command.answer?.status === 501 ? port : proxy!.port;
            const code = hook
              ? await hook.run(shell)
              : withGenerated(command.code)
                  .replaceAll("localhost:3000", `127.0.0.1:${target}`)
                  .replaceAll("acc_XXXX", accountId);
            await shell.run(code);
            const count = Number(readFileSync(join(log, "count"), "utf8"));
            let last: { status: number; body: string } | undefined;
            for (; calls < count; calls++) {
              const n = calls + 1;
              const status = Number(readFileSync(join(log, `${n}.status`), "utf8"));
              const body = existsSync(join(log, `${n}.body`)) ? readFileSync(join(log, `${n}.body`), "utf8") : "";
              last = { status, body };
              // A 5xx only where the page shows that very status (501 `not_configured` on the defaults).
              if (status === 0 || (status >= 500 && status !== command.answer?.status))
                problems.push(`${command.code}\n  -> ${status === 0 ? "no answer" : status} ${body.slice(0, 300)}`);
              for (const found of proxy!.violations(curlHeaders(join(log, `${n}.headers`))))
                problems.push(`${command.code}\n  -> ${status} breaks the OpenAPI description: ${found}`);
            }
            if (command.hasCurl && !last) problems.push(`${command.code}\n  -> curl never ran`);
            if (!command.answer || !last) continue;
            if (command.answer.status !== undefined && command.answer.status !== last.status) {
              problems.push(
                `${command.code}\n  -> status ${last.status}, the page ` +
                  `shows ${command.answer.status}: ${last.body.slice(0, 300)}`,
              );
            }
            if (command.answer.status === undefined && (last.status < 200 || last.status > 299)) {
              problems.push(
                `${command.code}\n  -> status ${last.status} where ` +
                  `the page shows an answer: ${last.body.slice(0, 300)}`,
              );
            }
            let shown: unknown;
            try {
              shown = JSON.parse(
                withGenerated(command.answer.text).replaceAll("{...}", "{}").replaceAll("[...]", "[]"),
              );
            } catch {
              problems.push(
                `${page}: the answer shown after \`${command.code.slice(0, 80)}…\` is not JSON: ${command.answer.text}`,
              );
              continue;
            }
            let actual: unknown;
            try {
              actual = JSON.parse(last.body);
            } catch {
              problems.push(`${command.code}\n  -> not JSON: ${last.body.slice(0, 300)}`);
              continue;
            }
            for (const problem of shapeProblems(shown, actual)) problems.push(`${command.code}\n  -> ${problem}`);
            for (const field of GENERATED_FIELDS) {
              const shownValue = (shown as any)?.[field];
              const realValue = (actual as any)?.[field];
              if (["string", "number"].includes(typeof shownValue) && typeof realValue === typeof shownValue)
                generated.set(shownValue, realValue);
            }
          }
        }
      } finally {
        await shell.close();
        rmSync(log, { recursive: true, force: true });
      }
      expect(calls).toBeGreaterThan(0);
      expect(problems).toEqual([]);
    });
  }

  /**
   * A bash function by which the first `npm run parley` of the pages runs through npm itself, as printed, and
   * every later one runs the command npm ran for it: package.json's `parley` script, with the arguments after
   * `--`, from the checkout's root and with its node_modules/.bin first on the PATH, as npm runs a script. The
   * first shows that npm hands the pages' arguments to that script; npm's own start, some 0.3 s of CPU, is
   * then not paid again for each of the pages' fifty-odd commands. Every other npm command goes to npm.
   */
  function npmOnceThenItsScript(): string {
    const script = (JSON.parse(read("package.json")) as { scripts: Record<string, string> }).scripts.parley!;
    return `npm() {
  if [ "$1 $2" = "run parley" ] && [ -n "$__npm_ran_parley" ]; then
    shift 2; [ "$1" = -- ] && shift
    (cd "${workspace}" && PATH="${workspace}/node_modules/.bin:$PATH" ${script} "$@")
    return
  fi
  [ "$1 $2" = "run parley" ] && __npm_ran_parley=1
  command npm "$@"
}`;
  }

  // After the pages' own examples, which expect a Parley where only they have made rooms and reservations.
  test("every page's npm run parley commands run as printed, through Parley's socket, and exit 0", async () => {
    // In the checkout beside the running Parley, as the page says, with nothing set but a PATH and a HOME.
    const shell = new Shell(workspace, { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: workspace });
    const problems: string[] = [];
    let ran = 0;
    try {
      await shell.run(npmOnceThenItsScript());
      const blocks = pages().flatMap((page) =>
        parse(read(page))
          .fences.filter((fence) => fence.info === "sh" && /npm run parley /.test(fence.body))
          .map((fence) => ({ page, fence })),
      );
      expect(blocks.map(({ page }) => page)).toEqual(
        expect.arrayContaining([
          "docs/cli.md",
          "docs/tokens.md",
          "docs/mapper.md",
          "docs/limits.md",
          "docs/console.md",
        ]),
      );
      for (const { page, fence } of blocks) {
        for (const command of commands(fence.body)) {
          // Its standard input is not the shell's own, where the next commands wait (a command may read stdin).
          const output = await shell.run(
            `{ ${command.code.replaceAll("localhost:3000", `127.0.0.1:${port}`)} ; } 2>&1 </dev/null; __rc=$?`,
            60_000,
          );
          ran++;
          const code = await shell.value("__rc");
          // A load test that ran and judged its objectives has run as printed: whether this machine, shared
          // with the rest of the suite, meets them is the machine's (exit 5 is "an objective missed").
          const judged = /\bload-test\b/.test(command.code) && code === "5" && /\bFAIL\b/.test(output);
          if (code !== "0" && !judged)
            problems.push(`${page}: ${command.code}\n  -> exit ${code}: ${output.slice(0, 400)}`);
        }
      }
    } finally {
      await shell.close();
    }
    expect(ran).toBeGreaterThan(10);
    expect(problems).toEqual([]);
  }, 180_000);

  /** An endpoint for a receiver on `port`, its secret, and a reservation made: its event is on its way there. */
  async function deliverTo(port: number): Promise<{ secret: string; send(): Promise<void> }> {
    const call = (path: string, body: unknown) =>
      fetch(`${base}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      }).then((answer) => answer.json() as Promise<any>);
    const added = await call("/api/v1/webhooks", {
      url: `http://127.0.0.1:${port}/`,
      event_types: ["reservation.created"],
    });
    if (!added.secret) throw new Error(`adding the endpoint failed: ${JSON.stringify(added)}`);
    return {
      secret: added.secret,
      async send() {
        await call("/api/v1/scheduler/reservation", {
          name: `sdk-webhook-${crypto.randomUUID()}`,
          mail_owner: "alice@example.com",
          start_time: new Date(Date.now() + 3_600_000).toISOString(),
          duration: 30,
        });
      },
    };
  }

  test("docs/sdk.md: every JavaScript example runs on Node with the installed package", async () => {
    const app = await installedSdk();
    const problems: string[] = [];
    const examples = parse(read("docs/sdk.md")).fences.filter((fence) => fence.info === "js");
    // The webhooks example is a receiver that listens and verifies what Parley sends it.
    let verifiedDeliveries = 0;
    try {
      for (const [index, example] of examples.entries()) {
        writeFileSync(join(app, `example-${index}.mjs`), example.body);
        // A receiver listens until stopped: it is given an endpoint's secret, and passes once it verified a delivery.
        const receiving = example.body.includes(".listen(");
        const receiverPort = await freePort();
        const delivery = receiving ? await deliverTo(receiverPort) : undefined;
        const node = Bun.spawn(["node", `example-${index}.mjs`], {
          cwd: app,
          env: {
            PATH: NODE_ONLY_PATH,
            HOME: app,
            PARLEY_URL: base,
            PARLEY_API_KEY: apiKey,
            ...(delivery && { PORT: String(receiverPort), PARLEY_WEBHOOK_SECRET: delivery.secret }),
          },
          stdout: "pipe",
          stderr: "pipe",
        });
        if (delivery) {
          const said: string[] = [];
          const reading = (async () => {
            for await (const chunk of node.stdout) said.push(new TextDecoder().decode(chunk));
          })();
          const listening = await within(undefined, "the receiver to listen", 15_000, async () =>
            said.join("").includes("listening") ? true : undefined,
          ).catch(() => false);
          if (listening) await delivery.send();
          const verified = await within(undefined, "a verified delivery", 20_000, async () =>
            /verified reservation\.created evt_/.test(said.join("")) ? true : undefined,
          ).catch(() => false);
          node.kill("SIGTERM");
          const stderr = await new Response(node.stderr).text();
          await reading;
          if (verified) verifiedDeliveries++;
          else problems.push(`example ${index + 1} (a receiver):\n  -> said ${said.join("").slice(0, 300)} ${stderr}`);
          continue;
        }
        const killer = setTimeout(() => node.kill("SIGKILL"), 30_000);
        const [stderr, code] = await Promise.all([new Response(node.stderr).text(), node.exited]);
        clearTimeout(killer);
        if (code !== 0)
          problems.push(
            `example ${index + 1}:\n${example.body.slice(0, 200)}\n  -> exit ${code}: ${stderr.slice(0, 600)}`,
          );
      }
    } finally {
      rmSync(app, { recursive: true, force: true });
    }
    expect(examples.length).toBeGreaterThan(3);
    expect(problems).toEqual([]);
    expect(verifiedDeliveries).toBe(1);
  }, 240_000);
});
