/**
 * @parley/server-sdk as a user installs it (packed, installed from the tarball), against one
 * Parley started as a process on the embedded database. Its library on Node 20 with no Bun on
 * PATH, and on Deno: every route family (test/sdk/fixtures/drive-sdk.mjs). The `parley` command
 * line as operators run it: the repository's `npm run parley -- …` beside the Parley (through
 * DATA_DIR/parley.sock, no credential), the installed package's bin on Node without Bun through
 * the same socket and against a remote Parley with PARLEY_URL + PARLEY_TOKEN, and its errors: a
 * bad token, an account's API key, a stale or unsafe socket, no Parley at all, misuse.
 *
 * One Parley for both: a start of its own for each proved nothing more, and cost seconds of
 * CPU (PGlite). Each test's checks are of what it made itself, whatever the others made.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, copyFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { type Parley, startParley } from "../support/parley";
import { freePort } from "../support/ports";
import { installedSdk, NODE_ONLY_PATH } from "../support/sdk-package";

const ROOT = resolve(import.meta.dir, "../..");

let parley: Parley | undefined;
let app: string;
let scratch: string;

beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), "parley-cli-"));
  // Each kept as it comes, so that afterAll stops a Parley that started beside a failed install.
  const [started, installed] = await Promise.allSettled([
    startParley({
      embedded: true,
      env: {
        BOOTSTRAP_ACCOUNT: "true",
        SIP_ENABLED: "false",
        LOG_LEVEL: "warn",
        STREAMING_RECORDER_DRIVER: "command",
        STREAMING_RECORDER_COMMAND: "echo ready; exec sleep 60",
      },
    }),
    installedSdk(),
  ]);
  if (started.status === "fulfilled") parley = started.value;
  if (installed.status === "fulfilled") app = installed.value;
  for (const outcome of [started, installed]) if (outcome.status === "rejected") throw outcome.reason;
}, 240_000);

afterAll(async () => {
  await parley?.close();
  for (const folder of [app, scratch]) if (folder) rmSync(folder, { recursive: true, force: true });
});

interface Run {
  code: number;
  out: string;
  err: string;
}

async function finish(child: ReturnType<typeof Bun.spawn>, input?: string): Promise<Run> {
  if (input !== undefined) {
    const stdin = child.stdin as import("bun").FileSink;
    stdin.write(input);
    await stdin.end();
  }
  const killer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  const [out, err, code] = await Promise.all([
    new Response(child.stdout as ReadableStream).text(),
    new Response(child.stderr as ReadableStream).text(),
    child.exited,
  ]);
  clearTimeout(killer);
  return { code, out, err };
}

/** What `npm run parley` runs: package.json's script, read here so the two cannot drift apart. */
const PARLEY_SCRIPT: string = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).scripts.parley;

/**
 * `npm run parley -- …` in the repository, with `env` over the test's environment: the script as
 * npm runs it (`sh -c`, the arguments after it, node_modules/.bin first on PATH), without npm's
 * own start, half a second of CPU a call. test/docs.test.ts runs docs/cli.md's commands through npm.
 */
function npmParley(args: string[], env: Record<string, string | undefined>, input?: string): Promise<Run> {
  const child = Bun.spawn(["sh", "-c", `${PARLEY_SCRIPT} "$@"`, "parley", ...args], {
    cwd: ROOT,
    env: {
      ...process.env,
      PATH: `${join(ROOT, "node_modules/.bin")}:${process.env.PATH ?? "/usr/bin:/bin"}`,
      LOG_LEVEL: "silent",
      ...env,
    },
    stdin: input === undefined ? "ignore" : "pipe",
    stdout: "pipe",
    stderr: "pipe",
  });
  return finish(child, input);
}

/** The installed package's `parley` bin on Node, with only the system PATH (no Bun). */
function installedParley(args: string[], env: Record<string, string>, input?: string): Promise<Run> {
  const child = Bun.spawn([join(app, "node_modules/.bin/parley"), ...args], {
    cwd: app,
    env: { PATH: NODE_ONLY_PATH, HOME: app, ...env },
    stdin: input === undefined ? "ignore" : "pipe",
    stdout: "pipe",
    stderr: "pipe",
  });
  return finish(child, input);
}

/** A socket file whose process has gone, as a killed Parley leaves it: a server that exits without closing. */
function leaveStaleSocket(path: string): number | null {
  return Bun.spawnSync([
    "node",
    "-e",
    "require('node:net').createServer().listen(process.argv[1], () => process.exit(0))",
    path,
  ]).exitCode;
}

const json = (run: Run) => {
  if (run.code !== 0) throw new Error(`exit ${run.code}: ${run.err}\n${run.out}\n--- Parley said:\n${parley!.tail()}`);
  return JSON.parse(run.out);
};

describe("beside a running embedded Parley, through its socket", () => {
  test("npm run parley -- makes an account, adds a number, sets a limit, an operator, no credential", async () => {
    const local = { DATA_DIR: parley!.dataDir, DATABASE_URL: undefined };
    const made = await npmParley(["create-account", "made-by-npm"], local);
    expect(made.code).toBe(0);
    const accountId = /account\s+(acc_\S+)/.exec(made.out)?.[1];
    expect(made.out).toMatch(/api key\s+\S{20,}/);
    expect(accountId).toBeDefined();

    const number = json(
      await npmParley(["add-number", accountId!, "US", "+1 512 555 0100", "--default", "--json"], local),
    );
    expect(number).toMatchObject({
      account_id: accountId,
      country_code: "US",
      formatted_number: "+1 512 555 0100",
      is_default: true,
    });
    const limits = json(await npmParley(["set-limit", accountId!, "requests.scheduler", "7", "--json"], local));
    expect(limits.limits.find((limit: { name: string }) => limit.name === "requests.scheduler")).toMatchObject({
      value: 7,
      overridden: true,
    });
    const operator = json(await npmParley(["create-operator", "ops-npm", "--json"], local, "correct horse battery\n"));
    expect(operator.name).toBe("ops-npm");

    // Each went through the running Parley: its audit log holds them as the local operator's.
    const audit = json(await npmParley(["audit", "--json"], local));
    const actions = audit.entries
      .filter((entry: { actor_kind: string }) => entry.actor_kind === "local")
      .map((entry: { action: string }) => entry.action);
    expect(actions).toEqual(expect.arrayContaining(["create-account", "add-number", "set-limit", "create-operator"]));
  }, 120_000);

  test("the installed bin on Node does the same given DATA_DIR, and on PARLEY_URL with an operator token", async () => {
    const made = json(
      await installedParley(["create-account", "made-by-bin", "--json"], { DATA_DIR: parley!.dataDir }),
    );
    expect(made.api_key).toEqual(expect.any(String));
    const token = json(
      await installedParley(["create-operator-token", "deploy-script", "--json"], { DATA_DIR: parley!.dataDir }),
    );
    expect(token).toMatchObject({ name: "deploy-script", scope: "full" });
    expect(token.token).toStartWith("pop_");

    const remote = { PARLEY_URL: parley!.base, PARLEY_TOKEN: token.token };
    const account = json(await installedParley(["create-account", "made-remotely", "--json"], remote));
    const number = json(
      await installedParley(["add-number", account.account.id, "DE", "+49 30 555 0100", "--json"], remote),
    );
    expect(number.country_code).toBe("DE");
    const limits = json(
      await installedParley(["set-limit", account.account.id, "requests.usage", "default", "--json"], remote),
    );
    expect(limits.limits.find((limit: { name: string }) => limit.name === "requests.usage").overridden).toBe(false);
    const shown = await installedParley(["show-limits", account.account.id], remote);
    expect(shown.code).toBe(0);
    expect(shown.out).toMatch(/^requests\.usage\s+\d+\s+\S.*\sdefault$/m);
    expect(shown.out).not.toContain("null");
    const listed = json(await installedParley(["list-accounts", "--json"], remote));
    expect(listed.map((entry: { name: string }) => entry.name)).toEqual(
      expect.arrayContaining(["made-by-npm", "made-by-bin", "made-remotely"]),
    );
    const audit = json(await installedParley(["audit", "--limit", "5", "--json"], remote));
    expect(audit.entries[0]).toMatchObject({ actor: "deploy-script", actor_kind: "token", action: "set-limit" });

    // Text output names what was made.
    const text = await installedParley(["list-numbers", account.account.id], remote);
    expect(text.code).toBe(0);
    expect(text.out).toContain("+49 30 555 0100");

    // A read-only token lists but may not change.
    const reader = json(
      await installedParley(["create-operator-token", "dashboards", "--read-only", "--json"], remote),
    );
    const readOnly = { PARLEY_URL: parley!.base, PARLEY_TOKEN: reader.token };
    expect((await installedParley(["list-operator-tokens"], readOnly)).code).toBe(0);
    const refused = await installedParley(["create-account", "nope"], readOnly);
    expect(refused.code).toBe(3);
    expect(refused.err).toContain("read");
  }, 120_000);
});

describe("errors", () => {
  test("a bad or revoked operator token: exit 3, saying so", async () => {
    const bad = await installedParley(["list-accounts"], {
      PARLEY_URL: parley!.base,
      PARLEY_TOKEN: "pop_not-a-real-token",
    });
    expect(bad.code).toBe(3);
    expect(bad.err).toContain("PARLEY_TOKEN is unknown or revoked");

    const local = { DATA_DIR: parley!.dataDir };
    const made = json(await installedParley(["create-operator-token", "short-lived", "--json"], local));
    const remote = { PARLEY_URL: parley!.base, PARLEY_TOKEN: made.token };
    expect((await installedParley(["list-operator-tokens"], remote)).code).toBe(0);
    expect(json(await installedParley(["revoke-operator-token", String(made.id), "--json"], local))).toEqual({
      revoked: true,
      id: made.id,
    });
    const revoked = await installedParley(["list-operator-tokens"], remote);
    expect(revoked.code).toBe(3);
    expect(revoked.err).toContain("PARLEY_TOKEN is unknown or revoked");
  });

  test("an account's API key as PARLEY_TOKEN: exit 3, never accepted", async () => {
    const account = json(
      await installedParley(["create-account", "key-holder", "--json"], { DATA_DIR: parley!.dataDir }),
    );
    const run = await installedParley(["list-accounts"], { PARLEY_URL: parley!.base, PARLEY_TOKEN: account.api_key });
    expect(run.code).toBe(3);
    expect(run.err).toContain("PARLEY_TOKEN is not an operator token");
    expect(run.out).toBe("");
  });

  test("a stale socket: the installed bin says so, exit 4; npm run parley works on the database", async () => {
    const dataDir = mkdtempSync(join(scratch, "stale-"));
    const socket = join(dataDir, "parley.sock");
    expect(leaveStaleSocket(socket)).toBe(0);
    chmodSync(socket, 0o600);
    const run = await installedParley(["list-accounts"], { DATA_DIR: dataDir });
    expect(run.code).toBe(4);
    expect(run.err).toContain(`${socket} exists but nothing listens on it`);

    // In the repository the same situation is a stopped Parley: the
    // command runs on the database (the test's PostgreSQL here).
    const direct = await npmParley(["create-account", "made-directly"], { DATA_DIR: dataDir });
    expect(direct.code).toBe(0);
    expect(direct.err).toContain("working on the database directly");
    expect(direct.out).toMatch(/api key\s+\S{20,}/);
    // The same admin API served for the one command: its change is in the audit log, by local:<uid>:direct.
    const accountId = /account\s+(acc_\S+)/.exec(direct.out)?.[1];
    const audit = json(await npmParley(["audit", "--json"], { DATA_DIR: dataDir }));
    expect(audit.entries.find((entry: { target: string }) => entry.target === accountId)).toMatchObject({
      action: "create-account",
      actor: `local:${process.getuid!()}:direct`,
      actor_kind: "local",
    });
  }, 60_000);

  test("a socket of another mode is not trusted; no socket and no PARLEY_URL names both", async () => {
    const dataDir = mkdtempSync(join(scratch, "open-"));
    const socket = join(dataDir, "parley.sock");
    expect(leaveStaleSocket(socket)).toBe(0);
    chmodSync(socket, 0o666);
    const open = await installedParley(["list-accounts"], { DATA_DIR: dataDir });
    expect(open.code).toBe(4);
    expect(open.err).toContain("mode 666, not 600");

    const none = await installedParley(["list-accounts"], { DATA_DIR: join(scratch, "nothing-here") });
    expect(none.code).toBe(4);
    expect(none.err).toContain("DATA_DIR");
    expect(none.err).toContain("PARLEY_URL");
  });

  test("misuse: exit 2 with the usage; --help: exit 0 with it", async () => {
    const env = { DATA_DIR: parley!.dataDir };
    for (const args of [
      [],
      ["no-such-command"],
      ["set-limit", "acc_x"],
      ["list-accounts", "--no-such-flag"],
      ["set-limit", "acc_x", "requests.usage", "lots"],
      // Stray arguments: a command takes what its usage line lists, no more.
      ["list-accounts", "[--json]"],
      ["show-limits", "acc_x", "extra"],
    ]) {
      const run = await installedParley(args, env);
      expect({ args, code: run.code }).toEqual({ args, code: 2 });
      expect(run.err).toContain("usage: parley <command>");
    }
    for (const args of [["--help"], ["create-account", "--help"]]) {
      const help = await installedParley(args, env);
      expect({ args, code: help.code }).toEqual({ args, code: 0 });
      expect(help.out).toContain("usage: parley <command>");
    }
    const urlWithoutToken = await installedParley(["list-accounts"], { PARLEY_URL: parley!.base });
    expect(urlWithoutToken.code).toBe(2);
    expect(urlWithoutToken.err).toContain("PARLEY_TOKEN is not");
  });

  test("create-operator on a terminal says the minimum and asks twice; a short or differing one fails", async () => {
    // A real terminal (a pty, from util-linux's script): the password is asked for, not read from a pipe.
    const onTerminal = async (name: string, typed: string) => {
      const child = Bun.spawn(
        ["script", "-qec", `${process.execPath} src/parley.ts create-operator ${name}`, "/dev/null"],
        {
          cwd: ROOT,
          env: { ...process.env, DATA_DIR: parley!.dataDir, LOG_LEVEL: "silent" },
          stdin: "pipe",
          stdout: "pipe",
          stderr: "pipe",
        },
      );
      const run = await finish(child, typed);
      return { code: run.code, said: Bun.stripANSI(run.out) };
    };
    const short = await onTerminal("tty-short", "short\n");
    expect(short.said).toContain("password (at least 8 characters): ");
    expect(short.said).toContain("parley: the password has 5 characters; it needs at least 8");
    expect(short.code).toBe(2);
    const differing = await onTerminal("tty-differ", "long enough one\nlong enough two\n");
    expect(differing.said).toContain("the same password again: ");
    expect(differing.said).toContain("parley: the two passwords differ; no operator was made");
    expect(differing.code).toBe(2);
    const same = await onTerminal("tty-same", "long enough one\nlong enough one\n");
    expect(same.said).toContain("tty-same: sign in at /console");
    expect(same.code).toBe(0);
    const operators = json(await npmParley(["audit", "--limit", "50", "--json"], { DATA_DIR: parley!.dataDir }));
    const made = operators.entries.filter((entry: { action: string }) => entry.action === "create-operator");
    expect(made.map((entry: { target: string }) => entry.target)).not.toContain("tty-differ");
  }, 60_000);

  test("the commands a message suggests are written as the user runs them", async () => {
    // Two changes, so that one page of one entry has an older one to point to.
    for (const name of ["suggested-1", "suggested-2"])
      json(await npmParley(["create-account", name, "--json"], { DATA_DIR: parley!.dataDir }));
    const fromRepository = await npmParley(["audit", "--limit", "1"], { DATA_DIR: parley!.dataDir });
    expect(fromRepository.out).toMatch(/^older: npm run parley -- audit --before \d+$/m);
    const installed = await installedParley(["audit", "--limit", "1"], { DATA_DIR: parley!.dataDir });
    expect(installed.out).toMatch(/^older: npx parley audit --before \d+$/m);
  });

  test("a command Parley refuses (an unknown account): exit 1 with its message", async () => {
    const run = await installedParley(["list-numbers", "acc_unknown"], { DATA_DIR: parley!.dataDir });
    expect(run.code).toBe(1);
    expect(run.err).toStartWith("error: ");
  });
});

const FAMILIES = [
  "tokens",
  "scheduler",
  "webhooks",
  "events",
  "mapper",
  "streaming",
  "chat",
  "uploads",
  "usage",
  "admin",
  "errors",
];

/** An operator token made on the local socket, as an operator beside the server would. */
async function operatorToken(name: string): Promise<string> {
  const minted = await fetch("http://localhost/api/v1/admin/operator-tokens", {
    unix: join(parley!.dataDir, "parley.sock"),
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ name, scope: "full" }),
  });
  expect(minted.status).toBe(201);
  return ((await minted.json()) as { token: string }).token;
}

/** Runs the driver with `command` in the app folder; resolves with the families it passed. */
async function drive(command: string[], env: Record<string, string>): Promise<string[]> {
  copyFileSync(join(import.meta.dir, "fixtures/drive-sdk.mjs"), join(app, "drive-sdk.mjs"));
  const child = Bun.spawn([...command, "drive-sdk.mjs"], {
    cwd: app,
    env: { HOME: app, PARLEY_URL: parley!.base, PARLEY_API_KEY: await parley!.firstApiKey(), ...env },
    stdout: "pipe",
    stderr: "pipe",
  });
  const killer = setTimeout(() => child.kill("SIGKILL"), 90_000);
  const [stdout, stderr, code] = await Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
    child.exited,
  ]);
  clearTimeout(killer);
  if (code !== 0) console.error(`${stdout}\n${stderr}\n--- Parley said:\n${parley!.tail()}`);
  expect(code).toBe(0);
  return stdout.trim().split("\n");
}

describe("the installed package as a library", () => {
  test("on Node, a client without baseUrl and a request nobody answers say what is wrong", async () => {
    const port = await freePort();
    const script = `
      import { Parley } from "@parley/server-sdk";
      try { new Parley({}); console.log("made"); } catch (error) { console.log(error.name + ": " + error.message); }
      const parley = new Parley({ baseUrl: "http://127.0.0.1:${port}", apiKey: "prl_x" });
      await parley.generateToken().catch((error) => console.log(error.code + ": " + error.message));
    `;
    const run = await finish(
      Bun.spawn(["node", "--input-type=module", "-e", script], {
        cwd: app,
        env: { PATH: NODE_ONLY_PATH, HOME: app },
        stdout: "pipe",
        stderr: "pipe",
      }),
    );
    const [made, unanswered] = run.out.trim().split("\n");
    expect(made).toStartWith(
      "TypeError: new Parley({ baseUrl }) needs baseUrl, the http(s) address where Parley answers",
    );
    expect(made).toEndWith("got undefined");
    const url = `http://127.0.0.1:${port}/api/v1/misc/generate-token`;
    expect(unanswered).toStartWith(`network_error: no answer from Parley to POST ${url}: fetch failed: `);
    expect(unanswered).toContain(`ECONNREFUSED 127.0.0.1:${port}`);
  }, 60_000);

  test("the installed package drives every route family on Node without Bun", async () => {
    const passed = await drive(["node"], {
      PATH: NODE_ONLY_PATH,
      PARLEY_OPERATOR_TOKEN: await operatorToken("sdk-node"),
    });
    expect(passed).toEqual(FAMILIES.map((family) => `ok ${family}`));
  }, 120_000);

  test("the installed package drives every route family on Deno", async () => {
    // Deno from npm (a devDependency), reading the app's package.json and node_modules as installed.
    const deno = resolve(import.meta.dir, "../../node_modules/.bin/deno");
    const passed = await drive([deno, "run", "--allow-all", "--no-prompt"], {
      PATH: NODE_ONLY_PATH,
      DENO_NO_UPDATE_CHECK: "1",
      DENO_DIR: join(app, ".deno"),
      PARLEY_OPERATOR_TOKEN: await operatorToken("sdk-deno"),
    });
    expect(passed).toEqual(FAMILIES.map((family) => `ok ${family}`));
  }, 120_000);
});
