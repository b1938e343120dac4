DROP INDEX "participant_sessions_key_idx";--> statement-breakpoint
DROP INDEX "participant_sessions_time_idx";--> statement-breakpoint
ALTER TABLE "participant_sessions" ADD CONSTRAINT "participant_sessions_account_id_room_joined_at_breakout_id_occupant_jid_pk" PRIMARY KEY("account_id","room","joined_at","breakout_id","occupant_jid");