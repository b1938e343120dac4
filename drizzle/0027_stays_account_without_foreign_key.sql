ALTER TABLE "participant_sessions" DROP CONSTRAINT "participant_sessions_account_id_accounts_id_fk";
--> statement-breakpoint
CREATE FUNCTION "participant_sessions_go_with_account"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM "participant_sessions" WHERE "account_id" IN (SELECT "id" FROM "gone");
  RETURN NULL;
END $$;--> statement-breakpoint
CREATE TRIGGER "participant_sessions_go_with_account" AFTER DELETE ON "accounts" REFERENCING OLD TABLE AS "gone" FOR EACH STATEMENT EXECUTE FUNCTION "participant_sessions_go_with_account"();
