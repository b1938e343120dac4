DROP INDEX "conferences_open_name_key";--> statement-breakpoint
DROP INDEX "conferences_account_name_idx";--> statement-breakpoint
DROP INDEX "reservations_account_name_idx";--> statement-breakpoint
ALTER TABLE "accounts" ADD COLUMN "jitsi_domain" text DEFAULT '*' NOT NULL;--> statement-breakpoint
ALTER TABLE "phone_numbers" ADD COLUMN "is_default" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "conferences" ADD COLUMN "room_key" text;--> statement-breakpoint
-- Rows from before room keys: their stored (lower-cased) name is the best key there is.
UPDATE "conferences" SET "room_key" = "name";--> statement-breakpoint
ALTER TABLE "conferences" ALTER COLUMN "room_key" SET NOT NULL;--> statement-breakpoint
ALTER TABLE "reservations" ADD COLUMN "room_key" text;--> statement-breakpoint
-- Rows from before room keys: their stored (lower-cased) name is the best key there is.
UPDATE "reservations" SET "room_key" = "name";--> statement-breakpoint
ALTER TABLE "reservations" ALTER COLUMN "room_key" SET NOT NULL;--> statement-breakpoint
CREATE UNIQUE INDEX "phone_numbers_one_default_idx" ON "phone_numbers" USING btree ("account_id") WHERE "phone_numbers"."is_default";--> statement-breakpoint
CREATE UNIQUE INDEX "conferences_open_room_key" ON "conferences" USING btree ("account_id","room_key") WHERE "conferences"."ended_at" is null;--> statement-breakpoint
CREATE INDEX "conferences_account_room_key_idx" ON "conferences" USING btree ("account_id","room_key","starts_at");--> statement-breakpoint
CREATE INDEX "reservations_account_room_key_idx" ON "reservations" USING btree ("account_id","room_key","starts_at");