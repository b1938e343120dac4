/**
 * docs/realtime.md's Node.js block, run as written with the machine's `node` (Node.js 20,
 * which has no global WebSocket) and the `ws` package as the phoenix client's transport,
 * against a running Parley: the message it posts is stored. And why the page needs it: the
 * same client without a transport never connects on Node.js 20.
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
    expect(
      (
        await http(parley, "POST", "/api/v1/messaging/rooms/create", {
          body: { channel_id: "general" },
          auth: `Bearer ${token}`,
        })
      ).status,
    ).toBe(201);
  }, 90_000);

  afterAll(async () => {
    await parley?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function runNode(code: string) {
    const file = join(dir, `client-${crypto.randomUUID()}.mjs`);
    writeFileSync(file, code.replaceAll("ws://localhost:3000", parley.ws));
    const child = Bun.spawn(["node", file], {
      cwd: dir,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", TOKEN: token },
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
