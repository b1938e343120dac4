/**
 * Every per-account limit, with its default. Rates are counted in Redis over a fixed
 * window; quotas are counted in PostgreSQL. An operator changes one account's value with
 * `npm run parley -- set-limit`; docs/limits.md lists them for readers.
 */

export const ROUTE_FAMILIES = [
  "token",
  "scheduler",
  "mapper",
  "streaming",
  "events",
  "messaging",
  "uploads",
  "usage",
] as const;
export type RouteFamily = (typeof ROUTE_FAMILIES)[number];

interface RateDefinition {
  kind: "rate";
  /** Whose counter it is. */
  per: "account" | "API key" | "user";
  default: number;
  windowSeconds: number;
  description: string;
}

interface QuotaDefinition {
  kind: "quota";
  default: number;
  /** The IETF quota unit (`qu`), when it is not a count. */
  unit?: string;
  /** What Retry-After says: quotas free up when the account stops something, not at a set time. */
  retryAfterSeconds: number;
  description: string;
}

export type LimitDefinition = RateDefinition | QuotaDefinition;

const familyRate = (perSecond: number, what: string): RateDefinition => ({
  kind: "rate",
  per: "account",
  default: perSecond,
  windowSeconds: 1,
  description: `requests per second to ${what}`,
});

export const LIMITS = {
  "requests.token": familyRate(1000, "generate-token"),
  "requests.scheduler": familyRate(500, "the conference scheduler (Prosody's reservation checks)"),
  "requests.mapper": familyRate(500, "the conference mapper with the API key"),
  "requests.streaming": familyRate(100, "startRecording and stopRecording"),
  "requests.events": familyRate(2000, "event_sync (room and occupant events)"),
  "requests.messaging": familyRate(1000, "the chat REST routes"),
  "requests.uploads": familyRate(100, "upload URLs"),
  "requests.usage": familyRate(20, "usage reports"),
  "requests.per_key": {
    kind: "rate",
    per: "API key",
    default: 5000,
    windowSeconds: 1,
    description: "requests per second with one API key, every route together",
  },
  "tokens.per_key": {
    kind: "rate",
    per: "API key",
    default: 200,
    windowSeconds: 2,
    description: "tokens one API key may mint per two seconds (100/s on average, bursts of 200)",
  },
  "socket.messages": {
    kind: "rate",
    per: "user",
    default: 100,
    windowSeconds: 1,
    description: "socket frames per second from one user (heartbeats are free)",
  },
  "streams.concurrent": { kind: "quota", default: 50, retryAfterSeconds: 60, description: "live streams at once" },
  "streams.queued": {
    kind: "quota",
    default: 20,
    retryAfterSeconds: 30,
    description: "streams waiting at once for a recorder worker with room",
  },
  "streams.units": {
    kind: "quota",
    default: 2000,
    unit: "recorder-units",
    retryAfterSeconds: 60,
    description: "recorder cost units of the live and queued streams at once (a plain stream costs 30)",
  },
  "recordings.concurrent": {
    kind: "quota",
    default: 20,
    retryAfterSeconds: 60,
    description: "live streams at once that record (is_recording or is_vod)",
  },
  "chat.stored_bytes": {
    kind: "quota",
    default: 10 * 1024 ** 3,
    unit: "content-bytes",
    retryAfterSeconds: 3600,
    description: "bytes of chat text stored (messages and poll options, UTF-8)",
  },
} satisfies Record<string, LimitDefinition>;

export type LimitName = keyof typeof LIMITS;

export function isLimitName(name: string): name is LimitName {
  return Object.hasOwn(LIMITS, name);
}

export function definitionOf(name: LimitName): LimitDefinition {
  return LIMITS[name];
}
