/**
 * What the transports check before a request reaches the user agent: the INVITE source
 * allow-list, and a per-source request rate so one flooding source cannot starve the rest.
 */
import { isIP } from "node:net";
import { header, type SipMessageHead } from "./message";

export type Verdict = "pass" | "drop" | { status: number; reason: string; headers?: string[] };

/** Past this many tracked sources (a spoofed-source flood), the rate table starts over rather than grow. */
const MAX_TRACKED_SOURCES = 100_000;

interface Range {
  family: 4 | 6;
  network: bigint;
  mask: bigint;
}

function unmapped(address: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  return mapped ? mapped[1]! : address;
}

function toBigInt(address: string): { family: 4 | 6; value: bigint } | undefined {
  const plain = unmapped(address);
  const family = isIP(plain);
  if (family === 4) {
    return { family: 4, value: plain.split(".").reduce((sum, octet) => (sum << 8n) + BigInt(Number(octet)), 0n) };
  }
  if (family !== 6) return undefined;
  const [head = "", tail = ""] = plain.split("::");
  const groups = (part: string) => (part === "" ? [] : part.split(":"));
  const left = groups(head);
  const right = groups(tail);
  const all = plain.includes("::") ? [...left, ...Array(8 - left.length - right.length).fill("0"), ...right] : left;
  return { family: 6, value: all.reduce((sum, group) => (sum << 16n) + BigInt(Number.parseInt(group, 16)), 0n) };
}

function parseRange(entry: string): Range {
  const [address, prefix] = entry.split("/");
  const parsed = toBigInt(address!)!;
  const bits = parsed.family === 4 ? 32 : 128;
  const length = prefix === undefined ? bits : Number(prefix);
  const mask = length === 0 ? 0n : ((1n << BigInt(length)) - 1n) << BigInt(bits - length);
  return { family: parsed.family, network: parsed.value & mask, mask };
}

export class SourceGuard {
  private readonly ranges: Range[];
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(
    allowedSources: string[],
    private readonly requestsPerSecond: number,
  ) {
    this.ranges = allowedSources.map(parseRange);
  }

  mayInvite(address: string): boolean {
    if (this.ranges.length === 0) return true;
    const source = toBigInt(address);
    if (!source) return false;
    return this.ranges.some((range) => range.family === source.family && (source.value & range.mask) === range.network);
  }

  admit(head: SipMessageHead, address: string): Verdict {
    if (!this.withinRate(address)) return "drop";
    const initialInvite = head.method === "INVITE" && !/;\s*tag=/i.test(header(head, "to") ?? "");
    if (initialInvite && !this.mayInvite(address)) return { status: 403, reason: "Forbidden" };
    return "pass";
  }

  /** A token bucket per source: requestsPerSecond tokens a second, holding at most one second's worth. */
  private withinRate(address: string): boolean {
    if (this.requestsPerSecond === 0) return true;
    const now = Date.now();
    let bucket = this.buckets.get(address);
    if (!bucket) {
      if (this.buckets.size >= MAX_TRACKED_SOURCES) this.buckets.clear();
      bucket = { tokens: this.requestsPerSecond, at: now };
      this.buckets.set(address, bucket);
    }
    bucket.tokens = Math.min(
      this.requestsPerSecond,
      bucket.tokens + ((now - bucket.at) / 1000) * this.requestsPerSecond,
    );
    bucket.at = now;
    if (bucket.tokens < 1) return false;
    bucket.tokens -= 1;
    return true;
  }
}
