CREATE TABLE "media_sessions" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"room" text NOT NULL,
	"kind" text NOT NULL,
	"subject" text NOT NULL,
	"started_at" timestamp with time zone NOT NULL,
	"ended_at" timestamp with time zone,
	"peak_viewers" integer DEFAULT 0 NOT NULL,
	"details" jsonb DEFAULT '{}'::jsonb NOT NULL
);
--> statement-breakpoint
CREATE TABLE "participant_sessions" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"room" text NOT NULL,
	"breakout_id" text DEFAULT '' NOT NULL,
	"occupant_jid" text NOT NULL,
	"user_id" text,
	"name" text,
	"email" text,
	"joined_at" timestamp with time zone NOT NULL,
	"left_at" timestamp with time zone,
	"left_estimated" boolean DEFAULT false NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "room_sessions" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"room" text NOT NULL,
	"breakout_id" text DEFAULT '' NOT NULL,
	"room_jid" text,
	"started_at" timestamp with time zone NOT NULL,
	"ended_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "room_usage_daily" (
	"account_id" text NOT NULL,
	"room" text NOT NULL,
	"day" date NOT NULL,
	"participant_seconds" integer DEFAULT 0 NOT NULL,
	"peak_participants" integer DEFAULT 0 NOT NULL,
	"distinct_participants" integer DEFAULT 0 NOT NULL,
	"phone_seconds" integer DEFAULT 0 NOT NULL,
	"streaming_seconds" integer DEFAULT 0 NOT NULL,
	"recording_seconds" integer DEFAULT 0 NOT NULL,
	"peak_viewers" integer DEFAULT 0 NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "room_usage_daily_account_id_room_day_pk" PRIMARY KEY("account_id","room","day")
);
--> statement-breakpoint
ALTER TABLE "media_sessions" ADD CONSTRAINT "media_sessions_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "participant_sessions" ADD CONSTRAINT "participant_sessions_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "room_sessions" ADD CONSTRAINT "room_sessions_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "room_usage_daily" ADD CONSTRAINT "room_usage_daily_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "media_sessions_key_idx" ON "media_sessions" USING btree ("account_id","kind","subject","started_at");--> statement-breakpoint
CREATE INDEX "media_sessions_subject_idx" ON "media_sessions" USING btree ("account_id","subject");--> statement-breakpoint
CREATE INDEX "media_sessions_room_idx" ON "media_sessions" USING btree ("account_id","room","started_at");--> statement-breakpoint
CREATE UNIQUE INDEX "participant_sessions_key_idx" ON "participant_sessions" USING btree ("account_id","room","breakout_id","occupant_jid","joined_at");--> statement-breakpoint
CREATE INDEX "participant_sessions_time_idx" ON "participant_sessions" USING btree ("account_id","room","joined_at");--> statement-breakpoint
CREATE INDEX "participant_sessions_account_time_idx" ON "participant_sessions" USING btree ("account_id","joined_at");--> statement-breakpoint
CREATE UNIQUE INDEX "room_sessions_key_idx" ON "room_sessions" USING btree ("account_id","room","breakout_id","started_at");--> statement-breakpoint
CREATE INDEX "room_sessions_time_idx" ON "room_sessions" USING btree ("account_id","started_at");--> statement-breakpoint
CREATE INDEX "room_usage_daily_day_idx" ON "room_usage_daily" USING btree ("account_id","day");--> statement-breakpoint
CREATE INDEX "conference_events_subject_idx" ON "conference_events" USING btree ("account_id","subject");