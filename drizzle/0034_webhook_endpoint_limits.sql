CREATE TABLE "webhook_slots" (
	"endpoint_id" text NOT NULL,
	"slot" integer NOT NULL,
	"held_until" timestamp with time zone DEFAULT 'epoch' NOT NULL,
	CONSTRAINT "webhook_slots_endpoint_id_slot_pk" PRIMARY KEY("endpoint_id","slot")
);
--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD COLUMN "rate_per_second" double precision;--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD COLUMN "rate_burst" integer;--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD COLUMN "max_in_flight" integer;--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD COLUMN "rate_tokens" double precision;--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD COLUMN "rate_refilled_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD COLUMN "throttled_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "webhook_slots" ADD CONSTRAINT "webhook_slots_endpoint_id_webhook_endpoints_id_fk" FOREIGN KEY ("endpoint_id") REFERENCES "public"."webhook_endpoints"("id") ON DELETE cascade ON UPDATE no action;