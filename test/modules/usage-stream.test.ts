/**
 * The usage report is streamed: its head goes out before the meetings are read, the rest in
 * chunks, and the streamed JSON and CSV are exactly the report built whole.
 */
import { beforeAll, expect, test } from "bun:test";
import postgres from "postgres";
import { sweepUnfolded } from "../../src/modules/usage/fold";
import { reportCsv, usageReport } from "../../src/modules/usage/service";
import { app, newAccount } from "../helpers";

const WINDOW = { start_date: "2026-10-01T00:00:00Z", end_date: "2026-10-08T00:00:00Z" };
let account: Awaited<ReturnType<typeof newAccount>>;

beforeAll(async () => {
  account = await newAccount();
  // 200 meetings of 12 people (one never leaves: closed at the room's end), written
  // as event_sync sends them (with the facts the log reads from them), then folded.
  const admin = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
  try {
    await admin.unsafe(
      `with rooms as (
        select r, 'meet-' || r as name, extract(epoch from timestamptz '2026-10-01 08:00:00+00' + (r % 6) * interval '1 day' + r * interval '1 minute')::bigint as start
        from generate_series(0, 199) as r
      ),
      people as (
        select rooms.*, p, 'u' || p || '@meet.example.com/r' || r as jid, start + 10 * p as joined, start + 600 + 37 * p as left_at from rooms, generate_series(0, 11) as p
      ),
      events as (
        select 'room_created' as kind, name, start as at, null as subject, name || '@conference.meet.example.com' as room_jid,
          to_timestamp(start) as started_at, null::timestamptz as ended_at, '[]'::jsonb as occupants,
          jsonb_build_object('event_name', 'muc-room-created', 'room_name', name, 'room_jid', name || '@conference.meet.example.com', 'created_at', start) as payload,
          'room_created|' || name || '||' || start as dedupe from rooms
        union all
        select 'room_destroyed', name, start + 4000, null, null, to_timestamp(start), to_timestamp(start + 4000), '[]'::jsonb,
          jsonb_build_object('event_name', 'muc-room-destroyed', 'room_name', name, 'created_at', start, 'destroyed_at', start + 4000, 'all_occupants', '[]'::jsonb),
          'room_destroyed|' || name || '||' || start from rooms
        union all
        select 'occupant_joined', name, joined, jid, null, null, null,
          jsonb_build_array(jsonb_build_object('jid', jid, 'userId', 'user-' || p, 'name', 'User "' || p || '", =1', 'joinedAt', to_timestamp(joined))),
          jsonb_build_object('room_name', name, 'occupant', jsonb_build_object('occupant_jid', jid, 'id', 'user-' || p, 'name', 'User "' || p || '", =1', 'joined_at', joined)),
          'occupant_joined|' || name || '||' || jid from people
        union all
        select 'occupant_left', name, left_at, jid, null, null, null,
          jsonb_build_array(jsonb_build_object('jid', jid, 'userId', 'user-' || p, 'joinedAt', to_timestamp(joined), 'leftAt', to_timestamp(left_at))),
          jsonb_build_object('room_name', name, 'occupant', jsonb_build_object('occupant_jid', jid, 'id', 'user-' || p, 'joined_at', joined, 'left_at', left_at)),
          'occupant_left|' || name || '||' || jid from people where p > 0
      )
      insert into conference_events (account_id, kind, room, occurred_at, subject, room_jid, started_at, ended_at, occupants, payload, dedupe_key)
      select $1, kind, name, to_timestamp(at), subject, room_jid, started_at, ended_at, occupants, payload, dedupe from events order by at`,
      [account.accountId],
    );
  } finally {
    await admin.end();
  }
  await sweepUnfolded(0, 1000);
});

async function chunksOf(accept: string): Promise<{ status: number; type: string | null; chunks: string[] }> {
  const response = await app.handle(
    new Request("http://parley.test/api/v1/pricing/cdr", {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${account.apiKey}`, accept },
      body: JSON.stringify(WINDOW),
    }),
  );
  const decoder = new TextDecoder();
  const chunks: string[] = [];
  for await (const chunk of response.body!) chunks.push(decoder.decode(chunk));
  return { status: response.status, type: response.headers.get("content-type"), chunks };
}

test("the JSON report is streamed: the head, then the meetings in chunks; it is the report built whole", async () => {
  const now = new Date();
  const { status, type, chunks } = await chunksOf("application/json");
  expect(status).toBe(200);
  expect(type).toStartWith("application/json");
  expect(chunks[0]).toMatch(
    /^\{"start_date":"2026-10-01T00:00:00\.000Z","end_date":"2026-10-08T00:00:00\.000Z","as_of":"[^"]+","rooms":\[$/,
  );
  expect(chunks.length).toBeGreaterThan(3);
  const streamed = JSON.parse(chunks.join(""));
  const whole = await usageReport(account.accountId, { startDate: WINDOW.start_date, endDate: WINDOW.end_date }, now);
  expect(streamed.rooms.length).toBe(200);
  // Each is complete to the instant it was asked for.
  expect(Date.parse(streamed.as_of)).toBeGreaterThanOrEqual(now.getTime());
  expect(streamed).toEqual({ ...JSON.parse(JSON.stringify(whole)), as_of: streamed.as_of });
  expect(streamed.rooms[0].users.at(0)).toMatchObject({
    user_id: "user-0",
    left_estimated: true,
    left_at: streamed.rooms[0].EndedAt,
  });
});

test("the CSV report is streamed, header line first, and is the CSV of the report built whole", async () => {
  const { status, type, chunks } = await chunksOf("text/csv");
  expect(status).toBe(200);
  expect(type).toBe("text/csv; charset=utf-8");
  expect(chunks[0]).toStartWith("room_id,meeting_id,");
  expect(chunks[0]).toEndWith("\r\n");
  expect(chunks.length).toBeGreaterThan(2);
  const whole = await usageReport(account.accountId, { startDate: WINDOW.start_date, endDate: WINDOW.end_date });
  // Each line's last column is as_of, the instant each was asked for.
  const withoutAsOf = (csv: string) => csv.replaceAll(/,[^,\r\n]*\r\n/g, "\r\n");
  expect(withoutAsOf(chunks.join(""))).toBe(withoutAsOf(reportCsv(whole)));
  expect(chunks.join("")).toContain(`"User ""0"", =1"`);
});
