DROP INDEX "conference_events_unfolded_room_idx";--> statement-breakpoint
CREATE INDEX "conference_events_unfolded_room_idx" ON "conference_events_unfolded" USING btree ("account_id","room");