CREATE TABLE "sip_calls" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"account_id" text,
	"call_id" text NOT NULL,
	"caller" text NOT NULL,
	"callee" text NOT NULL,
	"transport" text NOT NULL,
	"source" text NOT NULL,
	"room" text,
	"resolved_by" text,
	"mapper_id" bigint,
	"started_at" timestamp with time zone DEFAULT now() NOT NULL,
	"answered_at" timestamp with time zone,
	"joined_at" timestamp with time zone,
	"ended_at" timestamp with time zone,
	"final_status" integer,
	"reason" text
);
--> statement-breakpoint
ALTER TABLE "sip_calls" ADD CONSTRAINT "sip_calls_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "sip_calls_call_id_idx" ON "sip_calls" USING btree ("call_id","started_at");--> statement-breakpoint
CREATE INDEX "sip_calls_account_idx" ON "sip_calls" USING btree ("account_id","started_at");