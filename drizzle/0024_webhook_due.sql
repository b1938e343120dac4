CREATE TABLE "webhook_due" (
	"delivery_id" bigint PRIMARY KEY NOT NULL,
	"endpoint_id" text NOT NULL,
	"sequence" bigint NOT NULL,
	"due_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
DROP INDEX "webhook_deliveries_due_idx";--> statement-breakpoint
CREATE INDEX "webhook_due_due_at_idx" ON "webhook_due" USING btree ("due_at");--> statement-breakpoint
CREATE INDEX "webhook_due_endpoint_sequence_idx" ON "webhook_due" USING btree ("endpoint_id","sequence");