ALTER TABLE "sip_calls" ADD COLUMN "media_endpoint" text;--> statement-breakpoint
ALTER TABLE "sip_calls" ADD COLUMN "media_call_id" text;--> statement-breakpoint
ALTER TABLE "sip_calls" ADD COLUMN "media_status" integer;--> statement-breakpoint
ALTER TABLE "sip_calls" ADD COLUMN "packets_from_caller" bigint;--> statement-breakpoint
ALTER TABLE "sip_calls" ADD COLUMN "packets_to_caller" bigint;