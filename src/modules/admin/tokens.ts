/**
 * Operator tokens: credentials for scripts and the `parley` command line on another machine.
 * Shown once at creation, stored as a SHA-256 hash like API keys, revoked by id.
 */
import { randomBytes } from "node:crypto";
import { and, asc, eq, isNull, lt, or } from "drizzle-orm";
import { db } from "../../db/client";
import { AppError } from "../../core/errors";
import { hashApiKey } from "../accounts";
import { type Caller, type Operator, recordChange, type Scope } from "../audit";
import { operatorTokens } from "./schema";

export const OPERATOR_TOKEN_PREFIX = "pop_";
/** last_used_at is written at most this often per token, so reading does not mean a write each time. */
const LAST_USED_STEP_MS = 60_000;

export interface OperatorTokenSummary {
  id: number;
  name: string;
  scope: Scope;
  prefix: string;
  created_by: string;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
}

const iso = (date: Date | null) => date?.toISOString() ?? null;

export async function createOperatorToken(
  caller: Caller,
  name: string,
  scope: Scope,
): Promise<{ id: number; name: string; scope: Scope; prefix: string; token: string }> {
  const token = `${OPERATOR_TOKEN_PREFIX}${randomBytes(32).toString("base64url")}`;
  const prefix = token.slice(0, OPERATOR_TOKEN_PREFIX.length + 6);
  return db.transaction(async (tx) => {
    const [row] = await tx
      .insert(operatorTokens)
      .values({ name, scope, prefix, hash: hashApiKey(token), createdBy: caller.operator.name })
      .returning({ id: operatorTokens.id });
    await recordChange(tx, caller, {
      action: "create-operator-token",
      target: `token:${row!.id}`,
      detail: { name, scope, prefix },
    });
    return { id: row!.id, name, scope, prefix, token };
  });
}

export async function listOperatorTokens(): Promise<OperatorTokenSummary[]> {
  const rows = await db.select().from(operatorTokens).orderBy(asc(operatorTokens.id));
  return rows.map((row) => ({
    id: row.id,
    name: row.name,
    scope: row.scope as Scope,
    prefix: row.prefix,
    created_by: row.createdBy,
    created_at: row.createdAt.toISOString(),
    last_used_at: iso(row.lastUsedAt),
    revoked_at: iso(row.revokedAt),
  }));
}

/** The token stops working at once on every process: each request looks its hash up. */
export async function revokeOperatorToken(caller: Caller, id: number): Promise<void> {
  await db.transaction(async (tx) => {
    const [row] = await tx
      .update(operatorTokens)
      .set({ revokedAt: new Date() })
      .where(and(eq(operatorTokens.id, id), isNull(operatorTokens.revokedAt)))
      .returning({ name: operatorTokens.name });
    if (!row) throw new AppError("not_found", `no active operator token with id ${id}`);
    await recordChange(tx, caller, {
      action: "revoke-operator-token",
      target: `token:${id}`,
      detail: { name: row.name },
    });
  });
}

/** The operator a token stands for, or 401 when it is unknown or revoked. */
export async function operatorForToken(token: string): Promise<Operator> {
  const [row] = await db
    .select({
      id: operatorTokens.id,
      name: operatorTokens.name,
      scope: operatorTokens.scope,
      lastUsedAt: operatorTokens.lastUsedAt,
    })
    .from(operatorTokens)
    .where(and(eq(operatorTokens.hash, hashApiKey(token)), isNull(operatorTokens.revokedAt)));
  if (!row) throw new AppError("invalid_operator_token", "unknown or revoked operator token");
  const now = new Date();
  const stale = new Date(now.getTime() - LAST_USED_STEP_MS);
  if (!row.lastUsedAt || row.lastUsedAt < stale) {
    // The condition again in the update: of several processes seeing it stale at once, the first writes.
    await db
      .update(operatorTokens)
      .set({ lastUsedAt: now })
      .where(
        and(eq(operatorTokens.id, row.id), or(isNull(operatorTokens.lastUsedAt), lt(operatorTokens.lastUsedAt, stale))),
      );
  }
  return { kind: "token", name: row.name, scope: row.scope as Scope, tokenId: row.id };
}
