/**
 * The IETF RateLimit header fields, as draft-ietf-httpapi-ratelimit-headers-10 writes them:
 * `RateLimit-Policy: "name";q=100;w=1` (the quota of each policy that applied) and
 * `RateLimit: "name";r=42;t=1` (what is left of it and the seconds until it resets), both
 * Structured Field lists whose items are policy names as sf-strings.
 */
import { memoize } from "../core/memo";

export interface PolicyState {
  /** The limit's name, such as `tokens.per_key`. */
  name: string;
  /** Quota units the window allows. */
  quota: number;
  /** The window in seconds; absent for quotas that do not reset with time (concurrency, storage). */
  windowSeconds?: number;
  /** Quota unit when it is not requests, e.g. `content-bytes`. */
  unit?: string;
  remaining: number;
  /** Seconds until the quota resets (or, for a quota without a window, a hint to retry after). */
  resetSeconds: number;
}

/**
 * A policy name as a Structured Field string (RFC 9651 §3.3.3): printable ASCII with `"` and `\` escaped.
 * Policy and unit names are a handful of fixed strings: each is escaped once.
 */
const sfString = memoize(
  (value: string) => `"${value.replace(/[^\x20-\x7e]/g, "").replace(/["\\]/g, (c) => `\\${c}`)}"`,
  1_000,
);

export function rateLimitHeaders(policies: PolicyState[]): Record<string, string> {
  if (policies.length === 0) return {};
  // Every limited answer carries both: written in one pass, without the arrays a map and join would make.
  let policy = "";
  let state = "";
  for (const p of policies) {
    const name = sfString(p.name);
    const unit = p.unit ? `;qu=${sfString(p.unit)}` : "";
    const window = p.windowSeconds === undefined ? "" : `;w=${p.windowSeconds}`;
    const separator = policy === "" ? "" : ", ";
    policy += `${separator}${name};q=${p.quota}${unit}${window}`;
    state += `${separator}${name};r=${Math.max(0, p.remaining)};t=${Math.max(0, p.resetSeconds)}`;
  }
  return { "ratelimit-policy": policy, ratelimit: state };
}
