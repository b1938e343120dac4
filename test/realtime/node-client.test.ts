/**
 * docs/realtime.md's Node.js block, run as written with the machine's `node` (Node.js 20,
 * which has no global WebSocket) and the `ws` package as the phoenix client's transport,
 * against a running Parley with no rooms yet: it makes the room, and the message it posts is
 * stored. A refused join is printed and ends it with 1, never a silent wait. And why the page
 * needs `ws`: the same client without a transport never connects on Node.js 20.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { newAccount } from "../helpers";
import { http, type Parley, startParley } from "../support/parley";

const ROOT = resolve(import.meta.dir, "../..");

/** The page's js block that uses `ws`. */
function documentedBlock(): string {
  const page = readFileSync(join(ROOT, "docs/realtime.md"), "utf8");
  const block = [...page.matchAll(/```js\n([\s\S]*?)```/g)]
    .map((match) => match[1]!)
    .find((code) => code.includes('from "ws"'));
  if (!block) throw new Error("docs/realtime.md has no js block using ws");
  return block;
}

const nodeMajor = Number(/^v(\d+)/.exec(Bun.spawnSync(["node", "--version"]).stdout.toString())?.[1]);

describe("the phoenix client on the machine's Node.js", () => {
  let parley: Parley;
  let token: string;
  const dir = mkdtempSync(join(tmpdir(), "parley-node-client-"));

  beforeAll(async () => {
    // The script resolves phoenix and ws as an app would, from its node_modules.
    symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"));
    parley = await startParley({ embedded: false, env: { SIP_ENABLED: "false" } });
    const { apiKey } = await newAccount();
    const issued = await http(parley, "POST", "/api/v1/misc/generate-token", {
      body: { apiKey, user: { id: "nodejs", name: "Node" }, scope: "messaging" },
    });
    token = issued.body.token;
  }, 90_000);

  afterAll(async () => {
    await parley?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function runNode(code: string, as = token) {
    const file = join(dir, `client-${crypto.randomUUID()}.mjs`);
    writeFileSync(file, code.replaceAll("localhost:3000", `127.0.0.1:${parley.port}`));
    const child = Bun.spawn(["node", file], {
      cwd: dir,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", TOKEN: as },
      stdout: "pipe",
      stderr: "pipe",
    });
    const killer = setTimeout(() => child.kill("SIGKILL"), 15_000);
    const [stdout, stderr, code_] = await Promise.all([
      new Response(child.stdout).text(),
      new Response(child.stderr).text(),
      child.exited,
    ]);
    clearTimeout(killer);
    return { stdout, stderr, code: code_ };
  }

  test("the documented block with ws posts a message that is stored, and exits", async () => {
    const run = await runNode(documentedBlock());
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    const id = Number(/^stored as message (\d+)$/m.exec(run.stdout)?.[1]);
    expect(id).toBeGreaterThan(0);
    const listed = await http(parley, "GET", "/api/v1/messaging/rooms/general/messages?size=10", {
      auth: `Bearer ${token}`,
    });
    expect(JSON.stringify(listed.body)).toContain("hello from Node.js");
  }, 30_000);

  test("a join the server refuses is printed, and the script ends with 1", async () => {
    // Another account whose room "general" is open to bob only: alice's join is refused.
    const { apiKey } = await newAccount();
    const tokenOf = async (id: string) =>
      (
        await http(parley, "POST", "/api/v1/misc/generate-token", {
          body: { apiKey, user: { id, name: id }, scope: "messaging" },
        })
      ).body.token as string;
    const made = await http(parley, "POST", "/api/v1/messaging/rooms/create", {
      body: { channel_id: "general", allowed_user_ids: ["bob"] },
      auth: `Bearer ${await tokenOf("bob")}`,
    });
    expect(made.status).toBe(201);
    const run = await runNode(documentedBlock(), await tokenOf("alice"));
    expect(run.code).toBe(1);
    expect(run.stderr).toContain("joining chat:general was refused");
    expect(run.stderr).toContain("forbidden");
  }, 30_000);

  test.skipIf(nodeMajor >= 22)(
    "without a transport, Node.js 20 never connects (long polling, which Parley does not serve)",
    async () => {
      const withoutTransport = documentedBlock()
        .replace('import WebSocket from "ws";\n', "")
        .replace("transport: WebSocket, ", "")
        // Bounded: it would otherwise retry for ever, saying nothing.
        .concat('setTimeout(() => { console.log("connected:", socket.isConnected()); process.exit(0); }, 5000);\n');
      const run = await runNode(withoutTransport);
      expect(run.code).toBe(0);
      expect(run.stdout).toBe("connected: false\n");
    },
    30_000,
  );
});
