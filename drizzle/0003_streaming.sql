CREATE TABLE "streams" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"room" text NOT NULL,
	"stream_name" text NOT NULL,
	"state" text NOT NULL,
	"reason" text,
	"options" jsonb NOT NULL,
	"pod_name" text,
	"host" text,
	"pid" integer,
	"recording_key" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"started_at" timestamp with time zone,
	"stopped_at" timestamp with time zone
);
--> statement-breakpoint
ALTER TABLE "streams" ADD CONSTRAINT "streams_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "streams_name_idx" ON "streams" USING btree ("stream_name");--> statement-breakpoint
CREATE UNIQUE INDEX "streams_live_room_idx" ON "streams" USING btree ("account_id","room") WHERE "streams"."state" in ('starting', 'running', 'stopping');--> statement-breakpoint
CREATE INDEX "streams_pod_idx" ON "streams" USING btree ("pod_name","state");