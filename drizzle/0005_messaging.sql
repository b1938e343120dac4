CREATE TABLE "chat_messages" (
	"id" serial PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"room_id" integer NOT NULL,
	"parent_id" integer,
	"content" text NOT NULL,
	"content_type" text DEFAULT 'text' NOT NULL,
	"created_by" text NOT NULL,
	"created_by_name" text NOT NULL,
	"inserted_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "chat_poll_options" (
	"id" serial PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"message_id" integer NOT NULL,
	"position" integer NOT NULL,
	"text" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "chat_poll_votes" (
	"account_id" text NOT NULL,
	"message_id" integer NOT NULL,
	"user_id" text NOT NULL,
	"option_id" integer NOT NULL,
	"voted_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "chat_poll_votes_message_id_user_id_pk" PRIMARY KEY("message_id","user_id")
);
--> statement-breakpoint
CREATE TABLE "chat_rooms" (
	"id" serial PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"channel_id" text NOT NULL,
	"created_by" text NOT NULL,
	"owner_id" integer NOT NULL,
	"allowed_user_ids" text[] DEFAULT '{}'::text[] NOT NULL,
	"status" text DEFAULT 'active' NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "chat_users" (
	"id" serial PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"user_id" text NOT NULL,
	"name" text DEFAULT '' NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "chat_messages" ADD CONSTRAINT "chat_messages_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "chat_messages" ADD CONSTRAINT "chat_messages_room_id_chat_rooms_id_fk" FOREIGN KEY ("room_id") REFERENCES "public"."chat_rooms"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "chat_messages" ADD CONSTRAINT "chat_messages_parent_id_chat_messages_id_fk" FOREIGN KEY ("parent_id") REFERENCES "public"."chat_messages"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "chat_poll_options" ADD CONSTRAINT "chat_poll_options_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "chat_poll_options" ADD CONSTRAINT "chat_poll_options_message_id_chat_messages_id_fk" FOREIGN KEY ("message_id") REFERENCES "public"."chat_messages"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "chat_poll_votes" ADD CONSTRAINT "chat_poll_votes_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "chat_poll_votes" ADD CONSTRAINT "chat_poll_votes_message_id_chat_messages_id_fk" FOREIGN KEY ("message_id") REFERENCES "public"."chat_messages"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "chat_poll_votes" ADD CONSTRAINT "chat_poll_votes_option_id_chat_poll_options_id_fk" FOREIGN KEY ("option_id") REFERENCES "public"."chat_poll_options"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "chat_rooms" ADD CONSTRAINT "chat_rooms_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "chat_rooms" ADD CONSTRAINT "chat_rooms_owner_id_chat_users_id_fk" FOREIGN KEY ("owner_id") REFERENCES "public"."chat_users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "chat_users" ADD CONSTRAINT "chat_users_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "chat_messages_room_top_idx" ON "chat_messages" USING btree ("room_id","id") WHERE "chat_messages"."parent_id" is null;--> statement-breakpoint
CREATE INDEX "chat_messages_parent_idx" ON "chat_messages" USING btree ("parent_id","id");--> statement-breakpoint
CREATE INDEX "chat_messages_room_author_idx" ON "chat_messages" USING btree ("room_id","created_by");--> statement-breakpoint
CREATE INDEX "chat_messages_content_trgm_idx" ON "chat_messages" USING gin ("content" gin_trgm_ops);--> statement-breakpoint
CREATE INDEX "chat_poll_options_message_idx" ON "chat_poll_options" USING btree ("message_id","position");--> statement-breakpoint
CREATE UNIQUE INDEX "chat_rooms_account_channel_idx" ON "chat_rooms" USING btree ("account_id","channel_id");--> statement-breakpoint
CREATE UNIQUE INDEX "chat_users_account_user_idx" ON "chat_users" USING btree ("account_id","user_id");--> statement-breakpoint
CREATE INDEX "chat_users_name_trgm_idx" ON "chat_users" USING gin ("name" gin_trgm_ops);--> statement-breakpoint
CREATE INDEX "chat_users_user_id_trgm_idx" ON "chat_users" USING gin ("user_id" gin_trgm_ops);