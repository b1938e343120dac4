CREATE TABLE "conference_mappings" (
	"id" bigint PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"conference" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "conference_mappings_account_conference_key" UNIQUE("account_id","conference")
);
--> statement-breakpoint
CREATE TABLE "phone_numbers" (
	"id" serial PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"country_code" text NOT NULL,
	"formatted_number" text NOT NULL,
	"toll_free" boolean DEFAULT false NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "phone_numbers_account_number_key" UNIQUE("account_id","formatted_number")
);
--> statement-breakpoint
ALTER TABLE "conference_mappings" ADD CONSTRAINT "conference_mappings_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "phone_numbers" ADD CONSTRAINT "phone_numbers_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;