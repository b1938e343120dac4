-- What was left to deliver becomes the due set: each pending delivery, due when its next attempt
-- or, if a worker holds it, its lease says.
INSERT INTO "webhook_due" ("delivery_id", "endpoint_id", "sequence", "due_at")
SELECT "id", "endpoint_id", "sequence", greatest("next_attempt_at", coalesce("leased_until", "next_attempt_at"))
FROM "webhook_deliveries" WHERE "status" = 'pending';
