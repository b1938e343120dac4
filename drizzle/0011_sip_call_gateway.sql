ALTER TABLE "sip_calls" ADD COLUMN "gateway" text;--> statement-breakpoint
CREATE INDEX "sip_calls_open_idx" ON "sip_calls" USING btree ("gateway") WHERE "sip_calls"."ended_at" is null;