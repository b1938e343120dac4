import { pgTable, serial, text, timestamp } from "drizzle-orm/pg-core";

/** People who run the deployment: they see every account in the console. */
export const operators = pgTable("operators", {
  id: serial("id").primaryKey(),
  name: text("name").notNull().unique(),
  /** Bun.password's hash (argon2id), with its parameters. */
  passwordHash: text("password_hash").notNull(),
  createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
});
