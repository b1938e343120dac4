/**
 * The people who run the deployment: the admin API and the command line make them, the
 * console signs them in (console/sessions.ts).
 */
import { asc, eq } from "drizzle-orm";
import { config } from "../../core/config";
import { AppError } from "../../core/errors";
import { db } from "../../db/client";
import { operators } from "./schema";

const NAME = /^[\w.@-]{1,64}$/;

/** An operator's password as stored: argon2id, at the memory cost the configuration gives. */
export function hashPassword(password: string): Promise<string> {
  return Bun.password.hash(password, {
    algorithm: "argon2id",
    memoryCost: config.console.passwordMemoryKib,
    timeCost: 2,
  });
}

export async function createOperator(name: string, password: string): Promise<{ id: number; name: string }> {
  if (!NAME.test(name))
    throw new AppError("validation_failed", "name: 1 to 64 letters, digits, dots, dashes, underscores or @");
  if (password.length < 8) throw new AppError("validation_failed", "password: at least 8 characters");
  const passwordHash = await hashPassword(password);
  const [row] = await db
    .insert(operators)
    .values({ name, passwordHash })
    .onConflictDoNothing()
    .returning({ id: operators.id, name: operators.name });
  if (!row) throw new AppError("conflict", `an operator named ${name} exists already`);
  return row;
}

export async function listOperators(): Promise<Array<{ id: number; name: string; createdAt: Date }>> {
  return db
    .select({ id: operators.id, name: operators.name, createdAt: operators.createdAt })
    .from(operators)
    .orderBy(asc(operators.id));
}

/** The operator of that name, hash included; undefined for an unknown name, as for one no operator can have. */
export async function operatorNamed(name: string): Promise<typeof operators.$inferSelect | undefined> {
  if (!NAME.test(name)) return undefined;
  const [operator] = await db.select().from(operators).where(eq(operators.name, name));
  return operator;
}
