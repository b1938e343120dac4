/** Every feature that names a conference room names it by its one room key (src/core/room-key). */
import { describe, expect, test } from "bun:test";
import { eq } from "drizzle-orm";
import { db } from "../../src/db/client";
import { conferenceEvents } from "../../src/modules/conference-log/schema";
import { bareRoom } from "../../src/modules/streaming/stream";
import { resolveRoom } from "../../sip-gateway/rooms";
import { newAccount } from "../helpers";
import { at, deliver, occupantJoined } from "../support/event-sync";

const SPELLINGS = ["Design Review", "design review", "design%20review", "DESIGN%20Review"];

describe("one room, however it is spelled", () => {
  test("conference events are filed under the key", async () => {
    const account = await newAccount();
    for (const [index, room] of SPELLINGS.entries()) {
      const answer = await deliver(
        account.apiKey,
        occupantJoined(room, { occupant_jid: `u${index}@meet.example.com/x` }, at("10:00:00"), index + 1),
      );
      expect(answer.status).toBe(200);
    }
    const rows = await db
      .select({ room: conferenceEvents.room })
      .from(conferenceEvents)
      .where(eq(conferenceEvents.accountId, account.accountId));
    expect(rows.map((row) => row.room)).toEqual(SPELLINGS.map(() => "design%20review"));
  });

  test("streams take the key of room_name", () => {
    for (const room of SPELLINGS) expect(bareRoom(`${room}@conference.meet.example.com`)).toBe("design%20review");
    expect(bareRoom("Café")).toBe("caf%c3%a9");
  });

  test("the SIP room header is read as the key, its host kept", async () => {
    const directory = { conferenceForMapperId: async () => null };
    for (const room of SPELLINGS) {
      const resolution = await resolveRoom(
        { roomHeader: `${room}@Conference.Example.com` },
        { accountId: "acct" },
        directory,
      );
      expect(resolution).toMatchObject({
        kind: "room",
        resolved: {
          room: "design%20review",
          conference: "design%20review@conference.example.com",
          resolvedBy: "header",
        },
      });
    }
    expect(await resolveRoom({ roomHeader: "Café" }, { accountId: "acct" }, directory)).toMatchObject({
      kind: "room",
      resolved: { room: "caf%c3%a9" },
    });
  });
});
