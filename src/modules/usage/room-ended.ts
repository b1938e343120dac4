/**
 * room.ended, written by the fold that ends a room life, in the fold's transaction, with the
 * figures the usage report gives that meeting at that moment: the report's own computation
 * over the stays, streams and calls just folded, so the webhook and the report agree even
 * when the destroy delivery listed nobody. Only the figures: the report's lists of users,
 * streams and calls are not built (for a refold, building them was most of the fold's own CPU).
 */
import type { Database } from "../../db/client";
import { recordEvents } from "../catalogue";
import { meetingLives, prepareReport } from "./meeting-lives";
import { meetingFigures, meetingId } from "./meetings";

/** A room life that the fold has just ended. */
export interface EndedLife {
  accountId: string;
  room: string;
  breakoutId: string;
  startedAt: Date;
}

const lifeKey = (room: string, breakoutId: string, startedAt: Date) => `${room}|${breakoutId}|${startedAt.getTime()}`;

/**
 * Records room.ended for each life, one statement per account, accounts in a fixed order (each
 * takes its sequence row's lock, and two folds must not take them crosswise). Each account's
 * lives are described by one report over their rooms and the span of their starts.
 */
export async function announceEndedRooms(tx: Database, ended: EndedLife[]): Promise<void> {
  if (ended.length === 0) return;
  const asOf = new Date();
  const byAccount = Map.groupBy(ended, (life) => life.accountId);
  for (const accountId of [...byAccount.keys()].sort()) {
    const lives = byAccount.get(accountId)!;
    const starts = lives.map((life) => life.startedAt.getTime());
    const window = {
      start: new Date(starts.reduce((first, at) => Math.min(first, at))),
      end: new Date(starts.reduce((last, at) => Math.max(last, at))),
      rooms: [...new Set(lives.map((life) => life.room))],
    };
    const wanted = new Set(lives.map((life) => lifeKey(life.room, life.breakoutId, life.startedAt)));
    const ended = (await meetingLives(await prepareReport(accountId, window, asOf, tx), "figures")).filter(
      (life) => life.id !== null && wanted.has(lifeKey(life.room, life.breakoutId, life.startedAt)),
    );
    await recordEvents(
      tx,
      accountId,
      "room.ended",
      ended.map((life) => {
        const { seconds, figures: usage } = meetingFigures(life, asOf);
        const duration = Math.max(0, Math.floor((life.endedAt!.getTime() - life.startedAt.getTime()) / 1000));
        return {
          room: life.room,
          breakout_id: life.breakoutId,
          started_at: life.startedAt.toISOString(),
          ended_at: life.endedAt!.toISOString(),
          duration_seconds: duration,
          minutes: Math.ceil(duration / 60),
          participant_minutes: Math.ceil(seconds.participant / 60),
          participants: usage.distinct_participants,
          meeting_id: meetingId(life),
          usage,
        };
      }),
    );
  }
}
