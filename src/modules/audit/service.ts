/**
 * The audit log of the admin API: one row per change, with who made it (an operator, an
 * operator token, or the local operator on the Unix socket), from which address, to what.
 * A feature of its own, so the admin API writes it and the console reads it without either
 * importing the other.
 */
import { desc, lt } from "drizzle-orm";
import { type Database, db } from "../../db/client";
import { log } from "../../core/log";
import { auditEntries } from "./schema";

export type Scope = "read" | "full";

/** Who is asking the admin API. */
export interface Operator {
  kind: "token" | "local";
  /** The operator's name, the token's name, or local:<uid>. */
  name: string;
  scope: Scope;
  tokenId?: number;
}

/** An operator and where the request came from: what every change is recorded with. */
export interface Caller {
  operator: Operator;
  /** The client's IP address, or unix:<socket path>. */
  address: string;
}

export interface Change {
  /** The command line's name for it: create-account, set-limit, … */
  action: string;
  target: string | null;
  /** What was asked for, without any secret. */
  detail?: Record<string, unknown>;
}

/** Writes the entry with `executor`: a transaction's handle puts it in the same transaction as the change. */
export async function recordChange(executor: Database, caller: Caller, change: Change): Promise<void> {
  await executor.insert(auditEntries).values({
    actor: caller.operator.name,
    actorKind: caller.operator.kind,
    tokenId: caller.operator.tokenId ?? null,
    action: change.action,
    target: change.target,
    address: caller.address,
    detail: change.detail ?? {},
  });
}

/**
 * For changes made by another feature's service, which commits on its own: the entry is
 * written right after. Should that write fail, the change stands (it is done and its answer
 * may hold a key shown only once), and the entry goes to the error log instead, whole.
 */
export async function recordAfter(caller: Caller, change: Change): Promise<void> {
  try {
    await recordChange(db, caller, change);
  } catch (error) {
    log.error(
      {
        audit: { ...change, actor: caller.operator.name, actorKind: caller.operator.kind, address: caller.address },
        err: (error as Error).message,
      },
      "audit entry not stored",
    );
  }
}

export interface AuditEntry {
  id: number;
  at: string;
  actor: string;
  actor_kind: Operator["kind"];
  action: string;
  target: string | null;
  address: string;
  detail: Record<string, unknown>;
}

/** Newest first; `before` is the id the previous page's `next_before` gave. */
export async function listAudit(query: {
  limit?: number;
  before?: number;
}): Promise<{ entries: AuditEntry[]; next_before: number | null }> {
  const limit = query.limit ?? 50;
  const rows = await db
    .select()
    .from(auditEntries)
    .where(query.before === undefined ? undefined : lt(auditEntries.id, query.before))
    .orderBy(desc(auditEntries.id))
    .limit(limit + 1);
  const page = rows.slice(0, limit);
  return {
    entries: page.map((row) => ({
      id: row.id,
      at: row.at.toISOString(),
      actor: row.actor,
      actor_kind: row.actorKind as Operator["kind"],
      action: row.action,
      target: row.target,
      address: row.address,
      detail: row.detail as Record<string, unknown>,
    })),
    next_before: rows.length > limit ? page[page.length - 1]!.id : null,
  };
}
