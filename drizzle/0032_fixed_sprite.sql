DROP INDEX "streams_live_room_idx";--> statement-breakpoint
ALTER TABLE "streams" ADD COLUMN "queued_destinations" jsonb;--> statement-breakpoint
CREATE INDEX "streams_queued_idx" ON "streams" USING btree ("created_at") WHERE "streams"."state" = 'queued';--> statement-breakpoint
CREATE UNIQUE INDEX "streams_live_room_idx" ON "streams" USING btree ("account_id","room") WHERE "streams"."state" in ('queued', 'starting', 'running', 'stopping');