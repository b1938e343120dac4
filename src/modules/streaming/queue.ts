/**
 * The order of the queue of starts waiting for a recorder worker: priority first, then each
 * account's turn, then the time it was made. One key, QUEUE_KEY, orders the queue everywhere:
 * the queued answer's position, a worker taking the first queued streams when its units free,
 * a start job deciding whether a stream ahead of it should go first, and reconciliation.
 *
 * The turn is fair queueing: a stream queued by an account that has others queued at that
 * priority takes the turn after its account's last one; an account with none queued joins at
 * the queue's front turn. So accounts take turns (one with fifty queued does not make another's
 * single start wait behind all fifty), and an account's own starts keep their order.
 */
import { and, eq, type SQL, sql } from "drizzle-orm";
import { db } from "../../db/client";
import { streams } from "./schema";
import type { Stream } from "./stream";

type Reader = Pick<typeof db, "select">;

/** The queue's sort key, a row value: higher priority, then lower turn, then older, then the id. */
const QUEUE_KEY = sql`(-${streams.priority}, coalesce(${streams.queueTurn}, 0), ${streams.createdAt}, ${streams.id})`;

/**
 * The turn a stream of this account and priority would take were it queued now (see above);
 * given as SQL, they may name the columns of the row an update queues.
 */
export function nextTurn(accountId: string | SQL, priority: number | SQL) {
  return sql<number>`coalesce(
    (select max(q.queue_turn) + 1 from streams q
      where q.state = 'queued' and q.account_id = ${accountId} and q.priority = ${priority}),
    (select min(q.queue_turn) from streams q where q.state = 'queued' and q.priority = ${priority}),
    1)::int`;
}

/** The stream's own key; a stream not queued yet (starting) is judged with the turn it would take. */
async function keyOf(reader: Reader, stream: Stream) {
  let turn = stream.queueTurn;
  if (stream.state !== "queued" || turn === null) {
    const [next] = await reader.select({ turn: nextTurn(stream.accountId, stream.priority) }).from(sql`(select 1) one`);
    turn = next!.turn;
  }
  return sql`(${-stream.priority}::int, ${turn}::int, ${stream.createdAt.toISOString()}::timestamptz, ${stream.id}::text)`;
}

/** The queued streams in queue order (at most `limit` of them). */
export async function queuedStreams(limit = 10_000): Promise<Stream[]> {
  return db.select().from(streams).where(eq(streams.state, "queued")).orderBy(QUEUE_KEY).limit(limit);
}

/** The queued streams ahead of this one, first first. */
export async function queuedBefore(stream: Stream): Promise<Stream[]> {
  const key = await keyOf(db, stream);
  return db
    .select()
    .from(streams)
    .where(and(eq(streams.state, "queued"), sql`${QUEUE_KEY} < ${key}`))
    .orderBy(QUEUE_KEY)
    .limit(100);
}

/** The queued streams ahead of this one and itself: its place in the queue, 1 first. */
export async function queuePosition(reader: Reader, stream: Stream): Promise<number> {
  const key = await keyOf(reader, stream);
  const [ahead] = await reader
    .select({ count: sql<number>`count(*)::int` })
    .from(streams)
    .where(and(eq(streams.state, "queued"), sql`${QUEUE_KEY} < ${key}`));
  return ahead!.count + 1;
}

/** Every queued stream's place in the queue, 1 first, by id. */
export async function queuePlaces(): Promise<Map<string, number>> {
  const rows = await db
    .select({ id: streams.id, place: sql<number>`(row_number() over (order by ${QUEUE_KEY}))::int` })
    .from(streams)
    .where(eq(streams.state, "queued"));
  return new Map(rows.map((row) => [row.id, row.place]));
}
