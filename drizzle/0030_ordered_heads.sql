DROP INDEX "webhook_parked_endpoint_idx";--> statement-breakpoint
CREATE INDEX "webhook_parked_endpoint_sequence_idx" ON "webhook_parked" USING btree ("endpoint_id","sequence");