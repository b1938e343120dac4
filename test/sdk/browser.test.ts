/**
 * The built SDK in a real Chromium: bundled for the browser with its dependencies (no Node
 * built-ins may be needed), loaded into a page of Parley's own origin for the routes a user's
 * token opens, and into a page of another origin for the public mapper routes.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Webhook } from "standardwebhooks";
import { app, newAccount, tokenFor } from "../helpers";
import { type Chromium, startChromium } from "../support/browser";
import { sdkBuild } from "../support/sdk-package";

let server: ReturnType<typeof Bun.serve>;
let chromium: Chromium;
let bundle: string;

beforeAll(async () => {
  server = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: (request) => app.handle(request) });
  const { folder: sdk } = await sdkBuild();
  const folder = mkdtempSync(join(tmpdir(), "parley-sdk-browser-"));
  const entry = join(folder, "entry.js");
  writeFileSync(entry, `import * as sdk from ${JSON.stringify(join(sdk, "index.js"))};\nglobalThis.ParleySdk = sdk;\n`);
  const built = await Bun.build({ entrypoints: [entry], target: "browser", format: "iife", minify: true });
  rmSync(folder, { recursive: true, force: true });
  if (!built.success) throw new Error(built.logs.join("\n"));
  bundle = await built.outputs[0]!.text();
  chromium = await startChromium();
}, 180_000);

afterAll(async () => {
  await chromium?.close();
  server?.stop(true);
});

test("in Chromium the SDK runs chat routes, presigns an upload as a user, types errors, checks a webhook", async () => {
  const { apiKey } = await newAccount();
  const token = await tokenFor(apiKey, { id: "bob", name: "Bob" }, "messaging");
  const secret = `whsec_${Buffer.from("c".repeat(32)).toString("base64")}`;
  const body = JSON.stringify({
    id: "evt_9",
    type: "room.started",
    account_id: "acc_1",
    created_at: new Date().toISOString(),
    sequence: 9,
    data: { room: "r" },
  });
  const at = new Date();
  const headers = {
    "webhook-id": "evt_9",
    "webhook-timestamp": String(Math.floor(at.getTime() / 1000)),
    "webhook-signature": new Webhook(secret).sign("evt_9", at, body),
  };

  const context = await chromium.context();
  const page = await context.newPage();
  await page.goto(`http://127.0.0.1:${server.port}/healthz`);
  await page.evaluate(bundle);
  const seen = await page.evaluate(
    async ({ token, secret, body, headers }) => {
      const { Parley, ParleyError, verifyWebhook } = (globalThis as any).ParleySdk;
      const bob = new Parley({ baseUrl: location.origin, token });
      await bob.chat.createRoom({ channel_id: "from-a-browser" });
      const rooms = (await bob.chat.rooms()).rooms.map((room: { channel_id: string }) => room.channel_id);
      const messages: unknown[] = [];
      for await (const message of bob.chat.allMessages("from-a-browser")) messages.push(message);
      // The PUT itself goes to the bucket, another origin: whether it may is the bucket's CORS setting, not Parley's.
      const { key } = await bob.uploads.presign({ fileName: "browser/note.txt", fileType: "txt", fileSize: 5 });
      let refused: { isParleyError: boolean; code: string; status: number } | undefined;
      try {
        await new Parley({ baseUrl: location.origin, token: "not-a-token" }).chat.rooms();
      } catch (error: any) {
        refused = { isParleyError: error instanceof ParleyError, code: error.code, status: error.status };
      }
      const event = verifyWebhook(new Headers(headers), body, secret);
      return { rooms, messages: messages.length, key, refused, event: { type: event.type, id: event.id } };
    },
    { token, secret, body, headers },
  );
  expect(seen.rooms).toContain("from-a-browser");
  expect(seen.messages).toBe(0);
  expect(seen.key).toMatch(/browser\/note\.txt$/);
  expect(seen.refused).toEqual({ isParleyError: true, code: "invalid_token", status: 401 });
  expect(seen.event).toEqual({ type: "room.started", id: "evt_9" });
  expect(context.blocked).toEqual([]);
  await context.close();
}, 60_000);

test("from a page of another origin the public mapper routes answer the SDK (CORS open), no credential", async () => {
  const { accountId } = await newAccount();
  const elsewhere = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch: () => new Response("<!doctype html><title>app</title>", { headers: { "content-type": "text/html" } }),
  });
  const context = await chromium.context();
  try {
    const page = await context.newPage();
    await page.goto(`http://127.0.0.1:${elsewhere.port}/`);
    await page.evaluate(bundle);
    const answers = await page.evaluate(
      async ({ parleyOrigin, accountId }) => {
        const { Parley } = (globalThis as any).ParleySdk;
        const anonymous = new Parley({ baseUrl: parleyOrigin });
        const mapped = await anonymous.mapper.publicConference(accountId, {
          conference: "standup@conference.meet.example.com",
        });
        const again = await anonymous.mapper.publicConference(accountId, { id: mapped.id });
        const numbers = await anonymous.mapper.publicPhoneNumbers(accountId, {
          conference: "standup@conference.meet.example.com",
        });
        return {
          origin: location.origin,
          id: typeof mapped.id,
          conference: again.conference,
          numbers: Array.isArray(numbers),
        };
      },
      { parleyOrigin: `http://127.0.0.1:${server.port}`, accountId },
    );
    expect(answers).toEqual({
      origin: `http://127.0.0.1:${elsewhere.port}`,
      id: "number",
      conference: "standup@conference.meet.example.com",
      numbers: true,
    });
  } finally {
    await context.close();
    elsewhere.stop(true);
  }
}, 60_000);
