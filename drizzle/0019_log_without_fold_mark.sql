ALTER TABLE "conference_events" DROP COLUMN "folded_at";--> statement-breakpoint
-- The log is only ever appended to now: its pages no longer keep room for updates.
ALTER TABLE "conference_events" SET (fillfactor = 100);
