CREATE TABLE "conference_events_unfolded" (
	"event_id" bigint PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"room" text NOT NULL
);
--> statement-breakpoint
DROP INDEX "conference_events_unfolded_idx";--> statement-breakpoint
DROP INDEX "conference_events_unfolded_room_idx";--> statement-breakpoint
ALTER TABLE "conference_events_unfolded" ADD CONSTRAINT "conference_events_unfolded_event_id_conference_events_id_fk" FOREIGN KEY ("event_id") REFERENCES "public"."conference_events"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "conference_events_unfolded_room_idx" ON "conference_events_unfolded" USING btree ("account_id","room","event_id");--> statement-breakpoint
INSERT INTO "conference_events_unfolded" ("event_id", "account_id", "room") SELECT "id", "account_id", "room" FROM "conference_events" WHERE "folded_at" IS NULL;--> statement-breakpoint
ALTER TABLE "conference_events" SET (fillfactor = 50);
--> statement-breakpoint
CREATE FUNCTION "conference_events_list_unfolded"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO "conference_events_unfolded" ("event_id", "account_id", "room") SELECT "id", "account_id", "room" FROM "stored";
  RETURN NULL;
END $$;--> statement-breakpoint
CREATE TRIGGER "conference_events_list_unfolded" AFTER INSERT ON "conference_events" REFERENCING NEW TABLE AS "stored" FOR EACH STATEMENT EXECUTE FUNCTION "conference_events_list_unfolded"();
--> statement-breakpoint
ALTER TABLE "participant_sessions" SET (fillfactor = 60);
