/**
 * What a `parley load-test` run is asked to do: its parts, default rates, options, and the
 * objectives it is judged against, with the parsers of --duration and --objective. Apart from
 * the run so that the command line and every part read them without importing the run itself.
 */
export const PARTS = ["token", "chat", "events", "webhooks", "llhls"] as const;
export type PartName = (typeof PARTS)[number];

export const DEFAULT_RATES: Record<"token" | "chat" | "events", number> = { token: 20, chat: 10, events: 8 };

/**
 * Met unless stated otherwise: errors under 1 % everywhere, and each part's p99 under what a
 * user would notice (a webhook passes a queue and a worker, so it is given more).
 */
export const DEFAULT_OBJECTIVES = [
  "*.errors<1%",
  "token.p99<250ms",
  "chat.p99<250ms",
  "events.p99<500ms",
  "webhooks.p99<2000ms",
  "llhls.p99<250ms",
];

export interface LoadTestOptions {
  url: string;
  key: string;
  durationMs: number;
  rates: Record<"token" | "chat" | "events", number>;
  receivers: number;
  senders: number;
  viewers: number;
  /** A live stream's name, or its multivariant playlist's URL. */
  stream?: string;
  /** Start a low-latency stream for the run (a recorder and media server must serve the target). */
  startStream: boolean;
  /** The sink's address as the target reaches it; the sink then listens on all interfaces. */
  sinkUrl?: string;
  sinkPort: number;
  objectives: Objective[];
  /** Called once a second with the progress line, and with what could not be cleaned up. */
  progress?: (line: string) => void;
}

export interface Objective {
  text: string;
  part: PartName | "*";
  metric: "errors" | "p50" | "p95" | "p99";
  /** Percent for errors, milliseconds otherwise. */
  limit: number;
}

/** "60s", "2m", "500ms" or a number of seconds, in milliseconds. */
export function parseDuration(text: string): number | undefined {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(text.trim());
  if (!match) return undefined;
  const value = Number(match[1]) * (match[2] === "ms" ? 1 : match[2] === "m" ? 60_000 : 1_000);
  return value > 0 ? value : undefined;
}

/** `part.metric<value`: `token.p99<250ms`, `chat.p95<0.1s`, `*.errors<1%`. */
export function parseObjective(text: string): Objective | undefined {
  const match = /^(\*|[a-z]+)\.(errors|p50|p95|p99)<(\d+(?:\.\d+)?)(%|ms|s)?$/.exec(text.trim());
  if (!match) return undefined;
  const [, part, metric, value, unit] = match as unknown as [string, string, Objective["metric"], string, string?];
  if (part !== "*" && !PARTS.includes(part as PartName)) return undefined;
  if (metric === "errors" ? unit !== "%" && unit !== undefined : unit === "%") return undefined;
  return {
    text: text.trim(),
    part: part as Objective["part"],
    metric,
    limit: Number(value) * (unit === "s" ? 1000 : 1),
  };
}

/** The defaults, each replaced by a given objective on its metric for its part (or every part: `*`). */
export function withDefaults(given: Objective[]): Objective[] {
  const defaults = DEFAULT_OBJECTIVES.map((text) => parseObjective(text)!);
  const same = (fallback: Objective, chosen: Objective) =>
    fallback.metric === chosen.metric && (chosen.part === "*" || fallback.part === chosen.part);
  return [...defaults.filter((objective) => !given.some((other) => same(objective, other))), ...given];
}
