/** How config.ts reads the environment: typed values, each checked, every wrong one noted. */
import { isIP } from "node:net";

/** A wrong environment: every bad variable, one message each. */
export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(problems.join("; "));
  }
}

export type Env = Record<string, string | undefined>;

const SIP_URI = /^sips?:[^\s@]+(@[^\s@]+)?$/;

/**
 * Reads typed values from an environment. A bad value is noted and its default used, so that
 * one parse names every bad variable at once.
 */
export class EnvReader {
  readonly problems: string[] = [];

  constructor(readonly env: Env) {}

  problem<T>(message: string, fallback: T): T {
    this.problems.push(message);
    return fallback;
  }

  text(name: string, fallback: string): string {
    const value = this.env[name];
    return value === undefined || value === "" ? fallback : value;
  }

  optionalText(name: string): string | undefined {
    const value = this.env[name];
    return value === undefined || value === "" ? undefined : value;
  }

  integer(name: string, fallback: number, min: number, max: number): number {
    const raw = this.env[name];
    if (raw === undefined || raw === "") return fallback;
    const value = Number(raw);
    if (!Number.isInteger(value) || value < min || value > max) {
      return this.problem(`${name} must be a whole number from ${min} to ${max}, got "${raw}"`, fallback);
    }
    return value;
  }

  boolean(name: string, fallback: boolean): boolean {
    const raw = this.env[name];
    if (raw === undefined || raw === "") return fallback;
    if (/^(1|true|yes|on)$/i.test(raw)) return true;
    if (/^(0|false|no|off)$/i.test(raw)) return false;
    return this.problem(`${name} must be true or false, got "${raw}"`, fallback);
  }

  url<F extends string | undefined>(name: string, fallback: F, protocols: string[]): string | F {
    const raw = this.optionalText(name);
    if (raw === undefined) return fallback;
    let parsed: URL;
    try {
      parsed = new URL(raw);
    } catch {
      return this.problem(`${name} must be a URL, got "${raw}"`, fallback);
    }
    if (!protocols.includes(parsed.protocol)) {
      return this.problem(`${name} must use ${protocols.join(" or ")}, got "${parsed.protocol}"`, fallback);
    }
    return raw;
  }

  /** A comma-separated list; empty entries are dropped. */
  list(name: string, fallback = ""): string[] {
    return this.text(name, fallback)
      .split(",")
      .map((item) => item.trim())
      .filter((item) => item !== "");
  }

  /** An IPv4 or IPv6 address, optionally with a /prefix, for the SIP source allow-list. */
  cidrList(name: string): string[] {
    const entries = this.list(name);
    for (const entry of entries) {
      const [address, prefix, ...rest] = entry.split("/");
      const family = isIP(address ?? "");
      const bits = family === 6 ? 128 : 32;
      if (
        family === 0 ||
        rest.length > 0 ||
        (prefix !== undefined && !(/^\d+$/.test(prefix) && Number(prefix) <= bits))
      ) {
        return this.problem(
          `${name} must be a comma-separated list of IP addresses or CIDR ranges, got "${entry}"`,
          [],
        );
      }
    }
    return entries;
  }

  sipUri(name: string): string | undefined {
    const raw = this.optionalText(name);
    if (raw === undefined || SIP_URI.test(raw)) return raw;
    return this.problem(`${name} must be a SIP URI such as sip:trunk.example.com:5060, got "${raw}"`, undefined);
  }

  sipUriList(name: string): string[] {
    const entries = this.list(name);
    const wrong = entries.find((entry) => !SIP_URI.test(entry));
    return wrong === undefined
      ? entries
      : this.problem(`${name} must be a comma-separated list of SIP URIs, got "${wrong}"`, []);
  }

  /** A SIP header name: RFC 3261 token characters only. */
  headerName(name: string, fallback: string): string {
    const raw = this.text(name, fallback);
    if (/^[A-Za-z0-9!%*_+`'~.-]+$/.test(raw)) return raw;
    return this.problem(`${name} must be a SIP header name, got "${raw}"`, fallback);
  }

  /** A comma-separated list of whole seconds, such as a retry schedule. */
  secondsList(name: string, fallback: string): number[] {
    const entries = this.list(name, fallback);
    if (entries.length === 0 || entries.some((entry) => !/^\d{1,7}$/.test(entry))) {
      return this.problem(
        `${name} must be a comma-separated list of whole seconds such as ${fallback}, got "${this.env[name]}"`,
        fallback.split(",").map(Number),
      );
    }
    return entries.map(Number);
  }

  oneOf<T extends string>(name: string, fallback: T, values: readonly T[]): T {
    const raw = this.text(name, fallback);
    if ((values as readonly string[]).includes(raw)) return raw as T;
    return this.problem(`${name} must be one of ${values.join(", ")}, got "${raw}"`, fallback);
  }
}
