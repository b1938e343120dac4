/**
 * The per-process caches of the accounts' hot look-ups: how long an entry is served, and the
 * one list of what an invalidation drops (these look-ups, and other features' per-account
 * caches such as the limits). Apart so that the account look-ups (service.ts) and the signing
 * keys (signing-keys.ts) keep their caches without importing each other.
 */

/** How long a cached look-up may be served without a broadcast before it is read again. */
const CACHE_TTL_MS = 60_000;

export interface Cached<T> {
  value: T;
  at: number;
}

export function fresh<T>(entry: Cached<T> | undefined): entry is Cached<T> {
  return entry !== undefined && Date.now() - entry.at < CACHE_TTL_MS;
}

/** What an invalidation drops: the accounts' own caches, and other per-account ones (limits). */
const dependentCaches: Array<() => void> = [];

export function onAccountsInvalidated(clear: () => void): void {
  dependentCaches.push(clear);
}

/** Drops every cache of this process at once (a broadcast from any process calls it). */
export function clearCaches(): void {
  for (const clear of dependentCaches) clear();
}
