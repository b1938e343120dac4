/**
 * The event catalogue's outbox and log, and webhook endpoints: sequence numbers under
 * concurrent writers, no event for a rolled-back change, the cursor-paged log, retention,
 * endpoint CRUD with its once-shown secret and rotation, SSRF refusals, and that no route
 * ever shows one account another's events, endpoints or deliveries.
 */
import { describe, expect, test } from "bun:test";
import { eq, sql } from "drizzle-orm";
import { overrideConfig } from "../../src/core/config";
import { db } from "../../src/db/client";
import { ADMIN_PREFIX } from "../../src/modules/admin/routes";
import { createOperatorToken } from "../../src/modules/admin/tokens";
import { events, purgeOldEvents, recordEvent } from "../../src/modules/catalogue";
import { webhookEndpoints } from "../../src/modules/webhooks/schema";
import { call, newAccount } from "../helpers";
import { adminCli } from "../support/admin-cli";

const auth = (apiKey: string) => ({ authorization: `Bearer ${apiKey}` });

async function emit(accountId: string, room: string) {
  await db.transaction((tx) =>
    recordEvent(tx, accountId, "room.started", { room, breakout_id: "", started_at: new Date().toISOString() }),
  );
}

describe("outbox", () => {
  test("concurrent writers get strictly increasing sequence numbers with no gap, per account", async () => {
    const a = await newAccount();
    const b = await newAccount();
    await Promise.all(Array.from({ length: 40 }, (_, i) => emit(i % 2 ? a.accountId : b.accountId, `room-${i}`)));
    for (const account of [a, b]) {
      const rows = await db
        .select({ sequence: events.sequence })
        .from(events)
        .where(eq(events.accountId, account.accountId))
        .orderBy(events.sequence);
      expect(rows.map((row) => row.sequence)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    }
  });

  test("a change that rolls back leaves no event and uses no sequence number", async () => {
    const a = await newAccount();
    await emit(a.accountId, "kept-1");
    await expect(
      db.transaction(async (tx) => {
        await recordEvent(tx, a.accountId, "room.started", {
          room: "rolled-back",
          breakout_id: "",
          started_at: new Date().toISOString(),
        });
        throw new Error("the change failed");
      }),
    ).rejects.toThrow("the change failed");
    await emit(a.accountId, "kept-2");
    const page = await call("GET", "/api/v1/events", { headers: auth(a.apiKey) });
    expect(page.status).toBe(200);
    expect(page.body.events.map((event: any) => [event.sequence, event.data.room])).toEqual([
      [1, "kept-1"],
      [2, "kept-2"],
    ]);
  });
});

describe("GET /api/v1/events", () => {
  test("cursors are exact: the largest safe integer echoes back, a larger one is a 400 naming the field", async () => {
    const a = await newAccount();
    const created = await call("POST", "/api/v1/webhooks", {
      headers: auth(a.apiKey),
      body: { url: "http://localhost:9/" },
    });
    const lists = [
      ["after", "/api/v1/events/?after="],
      ["after", "/api/v1/events/stream?after="],
      ["before", `/api/v1/webhooks/${created.body.endpoint.id}/deliveries?before=`],
    ];
    for (const [field, path] of lists) {
      for (const cursor of ["9223372036854775807", "9300000000000000000", "99999999999999999", "9007199254740993"]) {
        const answer = await call("GET", `${path}${cursor}`, { headers: auth(a.apiKey) });
        expect([path, cursor, answer.status, answer.body.error?.code]).toEqual([path, cursor, 400, "bad_request"]);
        expect(answer.body.error.message).toStartWith(`query.${field}:`);
      }
    }
    const largest = await call("GET", "/api/v1/events/?after=9007199254740991", { headers: auth(a.apiKey) });
    expect(largest.status).toBe(200);
    expect(largest.body).toEqual({ events: [], next_after: 9007199254740991 });
    const replay = await call("POST", `/api/v1/webhooks/${created.body.endpoint.id}/replay`, {
      headers: auth(a.apiKey),
      body: { after: 9300000000000000000 },
    });
    expect([replay.status, replay.body.error.message.split(":")[0]]).toEqual([400, "after"]);
  });

  test("pages by cursor, filters by type, and shows only the caller's events", async () => {
    const a = await newAccount();
    const b = await newAccount();
    for (let i = 1; i <= 5; i++) await emit(a.accountId, `a-${i}`);
    await db.transaction((tx) =>
      recordEvent(tx, a.accountId, "reservation.deleted", { reservation_id: 7, room: "a-r" }),
    );
    await emit(b.accountId, "b-1");

    const first = await call("GET", "/api/v1/events?limit=2", { headers: auth(a.apiKey) });
    expect(first.status).toBe(200);
    expect(first.body.events.map((event: any) => event.sequence)).toEqual([1, 2]);
    expect(first.body.events[0]).toMatchObject({
      type: "room.started",
      account_id: a.accountId,
      data: { room: "a-1" },
    });
    expect(first.body.events[0].id).toMatch(/^evt_/);
    const second = await call("GET", `/api/v1/events?after=${first.body.next_after}&limit=10`, {
      headers: auth(a.apiKey),
    });
    expect(second.body.events.map((event: any) => event.sequence)).toEqual([3, 4, 5, 6]);
    const empty = await call("GET", `/api/v1/events?after=${second.body.next_after}`, { headers: auth(a.apiKey) });
    expect(empty.body).toEqual({ events: [], next_after: 6 });

    const typed = await call("GET", "/api/v1/events?types=reservation.deleted", { headers: auth(a.apiKey) });
    expect(typed.body.events.map((event: any) => event.type)).toEqual(["reservation.deleted"]);
    const unknown = await call("GET", "/api/v1/events?types=room.exploded", { headers: auth(a.apiKey) });
    expect(unknown.status).toBe(422);
    expect(unknown.body.error.code).toBe("validation_failed");

    const theirs = await call("GET", "/api/v1/events", { headers: auth(b.apiKey) });
    expect(theirs.body.events.map((event: any) => event.data.room)).toEqual(["b-1"]);
    expect((await call("GET", "/api/v1/events")).status).toBe(401);
    expect((await call("GET", "/api/v1/events?limit=0", { headers: auth(a.apiKey) })).status).toBe(400);
  });

  test("the retention purge removes only events older than EVENT_RETENTION_DAYS", async () => {
    const a = await newAccount();
    await emit(a.accountId, "old");
    await emit(a.accountId, "new");
    await db
      .update(events)
      .set({ createdAt: sql`now() - interval '31 days'` })
      .where(sql`${events.accountId} = ${a.accountId} and ${events.sequence} = 1`);
    expect(await purgeOldEvents()).toBeGreaterThanOrEqual(1);
    const page = await call("GET", "/api/v1/events", { headers: auth(a.apiKey) });
    expect(page.body.events.map((event: any) => event.data.room)).toEqual(["new"]);
  });
});

describe("webhook endpoints", () => {
  test("create shows the whsec_ secret once; list, get, patch, rotate, delete; others see nothing", async () => {
    const a = await newAccount();
    const b = await newAccount();
    const created = await call("POST", "/api/v1/webhooks", {
      headers: auth(a.apiKey),
      body: { url: "http://127.0.0.1:9/hook", event_types: ["room.started", "room.ended"], description: "rooms" },
    });
    expect(created.status).toBe(201);
    expect(created.body.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    const id = created.body.endpoint.id;
    expect(created.body.endpoint).toMatchObject({
      url: "http://127.0.0.1:9/hook",
      event_types: ["room.started", "room.ended"],
      enabled: true,
      ordered: false,
    });

    // The secret is stored sealed and never shown again.
    const [row] = await db.select().from(webhookEndpoints).where(eq(webhookEndpoints.id, id));
    expect(JSON.stringify(row!.secret)).not.toContain(created.body.secret.slice(6, 20));
    const listed = await call("GET", "/api/v1/webhooks", { headers: auth(a.apiKey) });
    expect(listed.body.endpoints.map((endpoint: any) => endpoint.id)).toEqual([id]);
    expect(JSON.stringify(listed.body)).not.toContain("whsec_");

    const patched = await call("PATCH", `/api/v1/webhooks/${id}`, {
      headers: auth(a.apiKey),
      body: { event_types: null, enabled: false, ordered: true },
    });
    expect(patched.body).toMatchObject({ event_types: null, enabled: false, ordered: true });
    const rotated = await call("POST", `/api/v1/webhooks/${id}/rotate-secret`, { headers: auth(a.apiKey) });
    expect(rotated.status).toBe(200);
    expect(rotated.body.secret).toMatch(/^whsec_/);
    expect(rotated.body.secret).not.toBe(created.body.secret);
    const [rotatedRow] = await db.select().from(webhookEndpoints).where(eq(webhookEndpoints.id, id));
    expect(rotatedRow!.previousSecretUntil!.getTime() - Date.now()).toBeGreaterThan(23.9 * 3_600_000);

    // Another account: not found everywhere, and an empty list.
    for (const [method, path, body] of [
      ["GET", `/api/v1/webhooks/${id}`],
      ["PATCH", `/api/v1/webhooks/${id}`, { enabled: true }],
      ["POST", `/api/v1/webhooks/${id}/rotate-secret`],
      ["GET", `/api/v1/webhooks/${id}/deliveries`],
      ["POST", `/api/v1/webhooks/${id}/deliveries/1/retry`],
      ["POST", `/api/v1/webhooks/${id}/replay`, { after: 0 }],
      ["DELETE", `/api/v1/webhooks/${id}`],
    ] as const) {
      const answer = await call(method, path, { headers: auth(b.apiKey), ...(body && { body }) });
      expect([method, path, answer.status]).toEqual([method, path, 404]);
      expect(answer.body.error.code).toBe("not_found");
    }
    expect((await call("GET", "/api/v1/webhooks", { headers: auth(b.apiKey) })).body).toEqual({ endpoints: [] });
    expect((await call("GET", "/api/v1/webhooks")).status).toBe(401);

    expect((await call("DELETE", `/api/v1/webhooks/${id}`, { headers: auth(a.apiKey) })).status).toBe(204);
    expect((await call("GET", `/api/v1/webhooks/${id}`, { headers: auth(a.apiKey) })).status).toBe(404);
  });

  test("bad input gets a 4xx in the error shape", async () => {
    const a = await newAccount();
    const unknownType = await call("POST", "/api/v1/webhooks", {
      headers: auth(a.apiKey),
      body: { url: "http://127.0.0.1:9/", event_types: ["room.exploded"] },
    });
    expect(unknownType.status).toBe(400);
    expect(unknownType.body.error.code).toBe("bad_request");
    const noUrl = await call("POST", "/api/v1/webhooks", { headers: auth(a.apiKey), body: {} });
    expect(noUrl.status).toBe(400);
    const replayBoth = await call("POST", "/api/v1/webhooks/wh_none/replay", { headers: auth(a.apiKey), body: {} });
    expect(replayBoth.status).toBe(422);
    // Authentication comes before validation: without a valid key, bad input is still 401.
    expect((await call("POST", "/api/v1/webhooks", { body: {} })).status).toBe(401);
    expect((await call("POST", "/api/v1/webhooks", { headers: auth("prl_nope"), body: { url: 5 } })).status).toBe(401);
    expect((await call("GET", "/api/v1/events?limit=abc")).status).toBe(401);
    expect((await call("GET", "/api/v1/webhooks/x/deliveries?status=nope")).status).toBe(401);
  });
});

describe("SSRF", () => {
  const refusedAlways = [
    "http://169.254.169.254/latest/meta-data/",
    "http://[fe80::1]/",
    "http://0.0.0.0/",
    "http://100.100.100.200/",
    "http://[fd00:ec2::254]/",
    "http://[::ffff:169.254.169.254]/",
  ];
  test("link-local and metadata addresses are refused even with private networks allowed; only http(s)", async () => {
    const a = await newAccount();
    for (const url of [
      ...refusedAlways,
      "ftp://127.0.0.1/",
      "file:///etc/passwd",
      "http://user:pw@127.0.0.1/",
      "not a url",
      "http://does-not-resolve.invalid/",
    ]) {
      const answer = await call("POST", "/api/v1/webhooks", { headers: auth(a.apiKey), body: { url } });
      expect([url, answer.status]).toEqual([url, 422]);
      expect(answer.body.error.message).toStartWith("url:");
    }
    const created = await call("POST", "/api/v1/webhooks", {
      headers: auth(a.apiKey),
      body: { url: "http://localhost:9/" },
    });
    expect(created.status).toBe(201);
    const moved = await call("PATCH", `/api/v1/webhooks/${created.body.endpoint.id}`, {
      headers: auth(a.apiKey),
      body: { url: refusedAlways[0] },
    });
    expect(moved.status).toBe(422);
  });

  /** IPv6 forms that carry a private or metadata IPv4 address, each with the address it carries. */
  const carriers = [
    "http://[64:ff9b::a9fe:a9fe]/", // NAT64: 169.254.169.254
    "http://[64:ff9b::a00:1]:6379/", // NAT64: 10.0.0.1
    "http://[64:ff9b:1::a00:1]/", // NAT64 local use: 10.0.0.1
    "http://[::127.0.0.1]/", // IPv4-compatible
    "http://[::ffff:0:a00:1]/", // IPv4-translated: 10.0.0.1
    "http://[::ffff:10.0.0.1]/", // IPv4-mapped
    "http://[2002:7f00:1::]/", // 6to4: 127.0.0.1
    "http://[2002:a9fe:a9fe::1]/", // 6to4: 169.254.169.254
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", // Teredo: client 127.0.0.1 stored inverted
  ];

  test("IPv6 forms carrying a private or metadata IPv4 address are refused: create, PATCH, admin", async () => {
    const a = await newAccount();
    const restore = overrideConfig({ webhooks: { allowPrivateNetworks: false } });
    const bootstrap = {
      operator: { kind: "local" as const, name: "local:test", scope: "full" as const },
      address: "unix:test",
    };
    const operator = (await createOperatorToken(bootstrap, `ssrf-${crypto.randomUUID().slice(0, 6)}`, "full")).token;
    try {
      const public4 = await call("POST", "/api/v1/webhooks", {
        headers: auth(a.apiKey),
        body: { url: "http://[64:ff9b::5db8:d70e]/" }, // NAT64 to a public address
      });
      expect(public4.status).toBe(201);
      const id = public4.body.endpoint.id;
      const answers: string[] = [];
      for (const url of carriers) {
        const created = await call("POST", "/api/v1/webhooks", { headers: auth(a.apiKey), body: { url } });
        const patched = await call("PATCH", `/api/v1/webhooks/${id}`, { headers: auth(a.apiKey), body: { url } });
        const admin = await call("POST", `${ADMIN_PREFIX}/accounts/${a.accountId}/webhooks`, {
          headers: { authorization: `Bearer ${operator}` },
          body: { url },
        });
        answers.push(`${url} ${created.status} ${patched.status} ${admin.status}`);
      }
      expect(answers).toEqual(carriers.map((url) => `${url} 422 422 422`));
    } finally {
      restore();
    }
    // Metadata stays refused inside any form even where private networks are allowed.
    for (const url of [carriers[0]!, carriers[7]!, "http://[64:ff9b:1::a9fe:a9fe]/"]) {
      const answer = await call("POST", "/api/v1/webhooks", { headers: auth(a.apiKey), body: { url } });
      expect([url, answer.status]).toEqual([url, 422]);
    }
  });

  test("loopback and private networks are refused unless WEBHOOK_ALLOW_PRIVATE_NETWORKS is set", async () => {
    const script = `
      const { checkWebhookUrl } = await import("./src/modules/webhooks/ssrf");
      const results = [];
      const refused = [
        "http://127.0.0.1/", "http://localhost/", "http://10.1.2.3/", "http://192.168.1.1/",
        "http://[::1]/", "http://[fd12::1]/", "http://93.184.215.14/",
      ];
      for (const url of refused) {
        results.push(await checkWebhookUrl(url).then(() => "allowed", (error) => error.code));
      }
      console.log(JSON.stringify(results));`;
    const run = (allow: string) =>
      Bun.spawnSync([process.execPath, "-e", script], {
        cwd: `${import.meta.dir}/../..`,
        env: { ...process.env, WEBHOOK_ALLOW_PRIVATE_NETWORKS: allow },
      });
    const refusing = run("false");
    expect(JSON.parse(refusing.stdout.toString())).toEqual([
      "validation_failed",
      "validation_failed",
      "validation_failed",
      "validation_failed",
      "validation_failed",
      "validation_failed",
      "allowed",
    ]);
    const allowing = run("true");
    expect(JSON.parse(allowing.stdout.toString())).toEqual([
      "allowed",
      "allowed",
      "allowed",
      "allowed",
      "allowed",
      "allowed",
      "allowed",
    ]);
  });
});

describe("the command line", () => {
  test("add, list, update, rotate, replay and remove webhooks as the API does", async () => {
    const a = await newAccount();
    const b = await newAccount();
    const added = adminCli(
      "add-webhook",
      a.accountId,
      "http://127.0.0.1:9/cli",
      "--types",
      "room.started,call.ended",
      "--ordered",
    );
    expect(added.code).toBe(0);
    const id = /webhook\s+(wh_\w+)/.exec(added.out)![1]!;
    expect(added.out).toMatch(/secret\s+whsec_/);
    const seen = await call("GET", `/api/v1/webhooks/${id}`, { headers: auth(a.apiKey) });
    expect(seen.body).toMatchObject({
      url: "http://127.0.0.1:9/cli",
      event_types: ["room.started", "call.ended"],
      ordered: true,
      enabled: true,
    });

    const listed = adminCli("list-webhooks", a.accountId, "--json");
    expect(JSON.parse(listed.out).map((endpoint: any) => endpoint.id)).toEqual([id]);
    expect(listed.out).not.toContain("whsec_");
    expect(adminCli("update-webhook", a.accountId, id, "--disable", "--types", "all").code).toBe(0);
    expect((await call("GET", `/api/v1/webhooks/${id}`, { headers: auth(a.apiKey) })).body).toMatchObject({
      enabled: false,
      event_types: null,
    });
    // Limits set and lifted from the command line; a bad one is a usage error.
    expect(
      adminCli("update-webhook", a.accountId, id, "--rate", "2.5", "--burst", "5", "--max-in-flight", "1").code,
    ).toBe(0);
    expect((await call("GET", `/api/v1/webhooks/${id}`, { headers: auth(a.apiKey) })).body).toMatchObject({
      rate_per_second: 2.5,
      rate_burst: 5,
      max_in_flight: 1,
    });
    expect(adminCli("update-webhook", a.accountId, id, "--rate", "none").code).toBe(0);
    expect((await call("GET", `/api/v1/webhooks/${id}`, { headers: auth(a.apiKey) })).body).toMatchObject({
      rate_per_second: null,
      max_in_flight: 1,
    });
    expect(adminCli("update-webhook", a.accountId, id, "--max-in-flight", "0").code).toBe(2);
    expect(adminCli("rotate-webhook-secret", a.accountId, id).out).toMatch(/secret\s+whsec_/);
    await emit(a.accountId, "cli-replayed");
    expect(adminCli("replay-webhook", a.accountId, id, "--after", "0").out).toContain("1 deliveries queued");

    // Another account's id, an unknown type, or a refused URL: exit 1 with the reason.
    expect(adminCli("remove-webhook", b.accountId, id).code).toBe(1);
    expect(adminCli("add-webhook", a.accountId, "http://127.0.0.1:9/", "--types", "room.exploded").code).toBe(1);
    const refused = adminCli("add-webhook", a.accountId, "http://169.254.169.254/");
    expect(refused.code).toBe(1);
    expect(refused.err).toContain("link-local");
    expect(adminCli("replay-webhook", a.accountId, id).code).toBe(2);
    expect(adminCli("remove-webhook", a.accountId, id).code).toBe(0);
    expect((await call("GET", `/api/v1/webhooks/${id}`, { headers: auth(a.apiKey) })).status).toBe(404);
  }, 60_000);
});
