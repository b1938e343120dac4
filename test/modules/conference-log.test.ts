import { beforeAll, describe, expect, test } from "bun:test";
import { and, eq } from "drizzle-orm";
import { db } from "../../src/db/client";
import { conferenceEvents } from "../../src/modules/conference-log/schema";
import { roomOccupancy } from "../../src/modules/conference-log/reads";
import { FOLD_CONSUMER, OCCUPANCY_CONSUMER, ringKey } from "../../src/modules/conference-log/rings";
import { appendEvent, type ConferenceEvent, storeEvents } from "../../src/modules/conference-log/service";
import { outbox } from "../../src/outbox/outbox";
import { call, newAccount } from "../helpers";
import { until } from "../support/wait";
import { at, deliver, occupantJoined, occupantLeft, roomCreated, roomDestroyed } from "../support/event-sync";

const alice = { name: "Alice", email: "alice@example.com", id: "alice", occupant_jid: "9f1c@meet.example.com/AbC1" };

async function storedEvents(accountId: string) {
  return db
    .select()
    .from(conferenceEvents)
    .where(eq(conferenceEvents.accountId, accountId))
    .orderBy(conferenceEvents.id);
}

describe("event_sync ingestion", () => {
  let account: Awaited<ReturnType<typeof newAccount>>;
  beforeAll(async () => {
    account = await newAccount();
  });

  test("the module's four deliveries, as its README shows them, are stored with their source times", async () => {
    const created = at("09:00:00");
    const answers = [
      await deliver(account.apiKey, roomCreated("catchup", created)),
      await deliver(account.apiKey, occupantJoined("catchup", alice, at("09:00:05"), 1)),
      await deliver(account.apiKey, occupantLeft("catchup", alice, at("09:00:05"), at("09:10:00"), 0)),
      await deliver(
        account.apiKey,
        roomDestroyed("catchup", created, at("09:10:01"), [
          { ...alice, joined_at: at("09:00:05"), left_at: at("09:10:00") },
        ]),
      ),
    ];
    expect(answers.map((answer) => [answer.status, answer.body.stored])).toEqual([
      [200, true],
      [200, true],
      [200, true],
      [200, true],
    ]);
    const rows = await storedEvents(account.accountId);
    expect(rows.map((row) => [row.kind, row.room, row.subject, row.occurredAt.toISOString()])).toEqual([
      ["room_created", "catchup", null, "2026-11-20T09:00:00.000Z"],
      ["occupant_joined", "catchup", alice.occupant_jid, "2026-11-20T09:00:05.000Z"],
      ["occupant_left", "catchup", alice.occupant_jid, "2026-11-20T09:10:00.000Z"],
      ["room_destroyed", "catchup", null, "2026-11-20T09:10:01.000Z"],
    ]);
    expect(rows[3]!.payload).toMatchObject({ all_occupants: [{ id: "alice", joined_at: at("09:00:05") }] });
  });

  test("a retried delivery is stored once and answers stored: false", async () => {
    const delivery = occupantJoined("retry-room", { occupant_jid: "guest@meet.example.com/x1" }, at("10:00:00"), 1);
    expect((await deliver(account.apiKey, delivery)).body).toEqual({ stored: true });
    expect((await deliver(account.apiKey, delivery)).body).toEqual({ stored: false });
    // The module does not resend byte for byte when the room's count changed meanwhile; the fact is the same.
    expect(
      (await deliver(account.apiKey, { ...delivery, body: { ...delivery.body, active_occupants_count: 2 } })).body,
    ).toEqual({ stored: false });
    const rows = (await storedEvents(account.accountId)).filter((row) => row.room === "retry-room");
    expect(rows).toHaveLength(1);
  });

  test("room names are stored lower case, and a breakout event keeps the main room's name", async () => {
    await deliver(account.apiKey, roomCreated("MixedCase", at("11:00:00")));
    await deliver(account.apiKey, roomCreated("mixedcase", at("11:05:00"), "b7e1d0c2"));
    const rows = (await storedEvents(account.accountId)).filter((row) => row.room === "mixedcase");
    expect(rows.map((row) => row.payload.breakout_room_id ?? null)).toEqual([null, "b7e1d0c2"]);
  });

  /** The rooms the fold is rung for from here on, as a cdr worker of this process hears them. */
  async function foldRings() {
    const heard = new Set<string>();
    const consumer = outbox.register({
      name: FOLD_CONSUMER,
      sweepEveryMs: 600_000,
      async drain(due) {
        if (due !== "sweep") for (const key of due) heard.add(key);
        return 0;
      },
    });
    await consumer.ready;
    return { heard, stop: () => consumer.stop() };
  }

  test("every appended event rings its room's fold, also on a repeat while it is unfolded", async () => {
    const event = {
      accountId: account.accountId,
      kind: "stream_started" as const,
      room: "catchup",
      occurredAt: new Date(at("12:00:00") * 1000),
      subject: "catchup-live",
      payload: { recording: true },
      dedupeKey: "stream_started|catchup-live",
    };
    const rings = await foldRings();
    try {
      expect(await appendEvent(event)).toBe(true);
      expect(
        await until(
          () => [...rings.heard],
          (keys) => keys.length > 0,
        ),
      ).toEqual([ringKey(event)]);
      rings.heard.clear();
      expect(await appendEvent(event)).toBe(false);
      expect(
        await until(
          () => [...rings.heard],
          (keys) => keys.length > 0,
        ),
      ).toEqual([ringKey(event)]);
    } finally {
      await rings.stop();
    }
  });

  test("a batch is stored in one transaction, each delivery once; each room's fold is rung after commit", async () => {
    const event = (room: string, key: string): ConferenceEvent => ({
      accountId: account.accountId,
      kind: "call_ended",
      room,
      occurredAt: new Date(at("14:00:00") * 1000),
      subject: key,
      payload: { reason: "caller_bye" },
      dedupeKey: `batch|${key}`,
    });
    // Stored before and not folded yet: its repeat rings the fold again.
    await appendEvent(event("batch-c", "earlier"));
    const idOf = async (key: string) => {
      const rows = await db
        .select({ id: conferenceEvents.id })
        .from(conferenceEvents)
        .where(and(eq(conferenceEvents.accountId, account.accountId), eq(conferenceEvents.dedupeKey, `batch|${key}`)));
      expect(rows).toHaveLength(1);
      return rows[0]!.id;
    };
    const rings = await foldRings();
    try {
      const batch = [
        event("batch-a", "a1"),
        event("batch-a", "a2"),
        event("batch-b", "b1"),
        event("batch-a", "a1"),
        event("batch-c", "earlier"),
      ];
      const stored = await db.transaction(async (tx) => {
        const inside = await storeEvents(tx, batch);
        // Not before the commit (a ring sent at once would have been heard during the store's queries).
        expect([...rings.heard]).toEqual([]);
        return inside;
      });
      expect(stored.isNew).toEqual([true, true, true, false, false]);
      const [a1, a2, b1] = [await idOf("a1"), await idOf("a2"), await idOf("b1")];
      expect(stored.added.map((added) => added.id)).toEqual([a1, a2, b1]);
      const rooms = ["batch-a", "batch-b", "batch-c"].map((room) => ringKey({ accountId: account.accountId, room }));
      expect(
        (
          await until(
            () => [...rings.heard],
            (keys) => keys.length >= 3,
          )
        ).sort(),
      ).toEqual(rooms.sort());
    } finally {
      await rings.stop();
    }
  });

  test("a batch whose transaction rolls back stores none of its events", async () => {
    const event: ConferenceEvent = {
      accountId: account.accountId,
      kind: "call_started",
      room: "batch-rollback",
      occurredAt: new Date(at("15:00:00") * 1000),
      subject: "rolled-back",
      dedupeKey: "batch|rolled-back",
    };
    const failed = db.transaction(async (tx) => {
      await storeEvents(tx, [event]);
      throw new Error("the write that held it failed");
    });
    await expect(failed).rejects.toThrow("the write that held it failed");
    expect((await storedEvents(account.accountId)).filter((row) => row.room === "batch-rollback")).toEqual([]);
    // Its retry is new, not a repeat.
    expect(await appendEvent(event)).toBe(true);
  });

  test("a room's occupancy is read from its stored joins, leaves and end", async () => {
    const where = { accountId: account.accountId, room: "occupied" };
    let n = 0;
    const store = (kind: "occupant_joined" | "occupant_left" | "room_destroyed", subject?: string) =>
      appendEvent({
        ...where,
        kind,
        occurredAt: new Date(),
        ...(subject && { subject }),
        dedupeKey: `occupancy|${++n}`,
      });
    expect(await roomOccupancy(where)).toEqual({ known: false, occupants: 0 });
    await store("occupant_joined", "ann");
    await store("occupant_joined", "bo");
    await store("occupant_left", "ann");
    expect(await roomOccupancy(where)).toEqual({ known: true, occupants: 1 });
    // A room's end empties it; a join after starts its next life.
    await store("room_destroyed");
    expect(await roomOccupancy(where)).toEqual({ known: true, occupants: 0 });
    await store("occupant_joined", "ann");
    expect(await roomOccupancy(where)).toEqual({ known: true, occupants: 1 });
  });

  test("a join, a leave or a room's end rings the room's occupancy once it commits; other events do not", async () => {
    const heard = new Set<string>();
    const consumer = outbox.register({
      name: OCCUPANCY_CONSUMER,
      sweepEveryMs: 600_000,
      async drain(due) {
        if (due !== "sweep") for (const key of due) heard.add(key);
        return 0;
      },
    });
    await consumer.ready;
    try {
      const base = { accountId: account.accountId, occurredAt: new Date() };
      await appendEvent({
        ...base,
        kind: "stream_started",
        room: "quiet-stream",
        subject: "s1",
        dedupeKey: "occupancy-ring|stream",
      });
      await appendEvent({
        ...base,
        kind: "occupant_left",
        room: "moving",
        subject: "cy",
        dedupeKey: "occupancy-ring|left",
      });
      expect(
        await until(
          () => [...heard],
          (keys) => keys.length > 0,
        ),
      ).toEqual([ringKey({ accountId: account.accountId, room: "moving" })]);
    } finally {
      await consumer.stop();
    }
  });

  test("the same delivery to two accounts is stored for each", async () => {
    const other = await newAccount();
    const delivery = roomCreated("shared-name", at("13:00:00"));
    expect((await deliver(account.apiKey, delivery)).body.stored).toBe(true);
    expect((await deliver(other.apiKey, delivery)).body.stored).toBe(true);
    expect((await storedEvents(other.accountId)).map((row) => row.room)).toEqual(["shared-name"]);
  });
});

describe("event_sync ingestion refuses", () => {
  let account: Awaited<ReturnType<typeof newAccount>>;
  beforeAll(async () => {
    account = await newAccount();
  });

  test("a missing, unknown or revoked API key", async () => {
    const delivery = roomCreated("auth-room", at("09:00:00"));
    expect((await call("POST", delivery.path, { body: delivery.body })).status).toBe(401);
    const wrong = await call("POST", delivery.path, {
      body: delivery.body,
      headers: { authorization: "Bearer prl_nope" },
    });
    expect(wrong.status).toBe(401);
    expect(wrong.body.error.code).toBe("invalid_api_key");
    // The key without Bearer works too, whichever way api_headers is written.
    expect(
      (await call("POST", delivery.path, { body: delivery.body, headers: { authorization: account.apiKey } })).status,
    ).toBe(200);
  });

  const cases: Array<[string, () => { path: string; body: Record<string, unknown> }, number, string]> = [
    [
      "no room_name",
      () => ({ ...roomCreated("x", 1), body: { event_name: "muc-room-created", created_at: 1 } }),
      400,
      "room_name",
    ],
    [
      "an empty room_name",
      () => ({ ...roomCreated("x", 1), body: { ...roomCreated("x", 1).body, room_name: "" } }),
      400,
      "room_name",
    ],
    [
      "the wrong event_name for the route",
      () => ({ ...roomCreated("x", 1), body: { ...roomCreated("x", 1).body, event_name: "muc-room-destroyed" } }),
      400,
      "event_name",
    ],
    ["a created_at in milliseconds", () => roomCreated("x", at("09:00:00") * 1000), 422, "created_at"],
    ["a negative created_at", () => roomCreated("x", -5), 400, "created_at"],
    [
      "a destroyed_at before created_at",
      () => roomDestroyed("x", at("09:00:00"), at("08:00:00"), []),
      422,
      "destroyed_at",
    ],
    [
      "a breakout without breakout_room_id",
      () => ({ ...roomCreated("x", 1), body: { ...roomCreated("x", 1).body, is_breakout: true } }),
      422,
      "breakout_room_id",
    ],
    [
      "a join without occupant",
      () => ({
        ...occupantJoined("x", alice, 1, 1),
        body: { ...occupantJoined("x", alice, 1, 1).body, occupant: undefined },
      }),
      400,
      "occupant",
    ],
    [
      "an occupant without occupant_jid",
      () => occupantJoined("x", { occupant_jid: "" }, 1, 1),
      400,
      "occupant.occupant_jid",
    ],
    [
      "a leave without left_at",
      () => ({
        ...occupantJoined("x", alice, 1, 1),
        path: "/api/v1/events/occupant/left",
        body: { ...occupantJoined("x", alice, 1, 1).body, event_name: "muc-occupant-left" },
      }),
      400,
      "occupant.left_at",
    ],
    [
      "a left_at before joined_at",
      () => occupantLeft("x", alice, at("10:00:00"), at("09:00:00"), 0),
      422,
      "occupant.left_at",
    ],
    [
      "an all_occupants entry with a bad joined_at",
      () => roomDestroyed("x", 1, 2, [{ ...alice, joined_at: "soon" as never }]),
      400,
      "all_occupants",
    ],
    [
      "a text active_occupants_count",
      () => ({
        ...occupantJoined("x", alice, 1, 1),
        body: { ...occupantJoined("x", alice, 1, 1).body, active_occupants_count: "two" },
      }),
      400,
      "active_occupants_count",
    ],
  ];
  for (const [what, make, status, field] of cases) {
    test(`${what}: ${status} naming ${field}`, async () => {
      const delivery = make();
      const answer = await call("POST", delivery.path, {
        body: delivery.body,
        headers: { authorization: `Bearer ${account.apiKey}` },
      });
      expect(answer.status).toBe(status);
      expect(answer.body.error.message).toContain(field);
    });
  }

  test("a body that is not JSON", async () => {
    const answer = await call("POST", "/api/v1/events/room/created", {
      raw: "{not json",
      headers: { authorization: `Bearer ${account.apiKey}`, "content-type": "application/json" },
    });
    expect(answer.status).toBe(400);
    expect(answer.body.error.code).toMatch(/invalid_json|bad_request/);
  });

  test("nothing was stored by the refused deliveries", async () => {
    expect((await storedEvents(account.accountId)).map((row) => row.room)).toEqual(["auth-room"]);
  });
});
