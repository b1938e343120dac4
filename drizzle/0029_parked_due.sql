CREATE TABLE "webhook_parked" (
	"delivery_id" bigint PRIMARY KEY NOT NULL,
	"endpoint_id" text NOT NULL,
	"sequence" bigint NOT NULL
);
--> statement-breakpoint
ALTER TABLE "webhook_parked" ADD CONSTRAINT "webhook_parked_delivery_id_webhook_deliveries_id_fk" FOREIGN KEY ("delivery_id") REFERENCES "public"."webhook_deliveries"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "webhook_parked_endpoint_idx" ON "webhook_parked" USING btree ("endpoint_id");