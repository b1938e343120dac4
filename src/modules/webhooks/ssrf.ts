/**
 * Where a webhook may be sent. A URL is checked when an endpoint is saved and again before
 * every attempt, against every address its host resolves to then (a name may be rebound to
 * an internal address after it was checked). Loopback and private networks are refused
 * unless WEBHOOK_ALLOW_PRIVATE_NETWORKS is set; link-local, cloud metadata and other
 * special addresses are refused always. An IPv6 address that carries an IPv4 one (NAT64,
 * 6to4, Teredo, mapped and compatible forms) is judged by the IPv4 address inside too.
 */
import { lookup } from "node:dns/promises";
import { BlockList, isIP } from "node:net";
import { config } from "../../core/config";
import { AppError } from "../../core/errors";

function blockList(v4: Array<[string, number]>, v6: Array<[string, number]>): BlockList {
  const list = new BlockList();
  for (const [address, prefix] of v4) list.addSubnet(address, prefix, "ipv4");
  for (const [address, prefix] of v6) list.addSubnet(address, prefix, "ipv6");
  return list;
}

/** Never reachable by a webhook: link-local (cloud metadata lives there), unspecified, multicast, reserved. */
const ALWAYS_REFUSED = blockList(
  [
    ["0.0.0.0", 8],
    ["169.254.0.0", 16],
    ["100.100.100.200", 32], // Alibaba Cloud's metadata service
    ["192.0.0.0", 24],
    ["224.0.0.0", 4],
    ["240.0.0.0", 4],
  ],
  [
    ["::", 128],
    ["fe80::", 10],
    ["fd00:ec2::254", 128], // AWS's metadata service over IPv6
    ["ff00::", 8],
  ],
);

/** Loopback and private networks: refused unless the operator allows them. */
const PRIVATE = blockList(
  [
    ["127.0.0.0", 8],
    ["10.0.0.0", 8],
    ["172.16.0.0", 12],
    ["192.168.0.0", 16],
    ["100.64.0.0", 10],
    ["198.18.0.0", 15],
  ],
  [
    ["::1", 128],
    ["fc00::", 7],
    // NAT64's local-use prefix (RFC 8215): a translator inside the operator's own network.
    ["64:ff9b:1::", 48],
  ],
);

export interface WebhookTarget {
  url: URL;
  /** The address checked, which an http attempt connects to so the name cannot be rebound in between. */
  address: string;
}

function refused(message: string): AppError {
  return new AppError("validation_failed", `url: ${message}`);
}

/** The eight 16-bit groups of an IPv6 address in text (a trailing dotted quad counts as two). */
function groupsOf(address: string): number[] {
  const parse = (part: string): number[] =>
    part === ""
      ? []
      : part.split(":").flatMap((group) => {
          if (!group.includes(".")) return [Number.parseInt(group, 16)];
          const [a = 0, b = 0, c = 0, d = 0] = group.split(".").map(Number);
          return [(a << 8) | b, (c << 8) | d];
        });
  const [head = "", tail] = address.split("::");
  const left = parse(head);
  const right = tail === undefined ? [] : parse(tail);
  return [...left, ...Array<number>(8 - left.length - right.length).fill(0), ...right];
}

function ipv4Of(high: number, low: number): string {
  return [high >> 8, high & 0xff, low >> 8, low & 0xff].join(".");
}

/**
 * The IPv4 addresses an IPv6 address carries, which a translator, tunnel or dual stack may
 * hand the connection to: IPv4-compatible (::/96), IPv4-mapped (::ffff:0:0/96), IPv4-translated
 * (::ffff:0:0:0/96), NAT64 (64:ff9b::/96, and the local-use 64:ff9b:1::/48 at every RFC 6052
 * position its prefix length may put it), 6to4 (2002::/16) and Teredo (2001::/32: the server,
 * and the client stored inverted).
 */
export function embeddedIpv4(address: string): string[] {
  const g = groupsOf(address);
  const zeroUpTo = (end: number) => g.slice(0, end).every((group) => group === 0);
  // :: and ::1 are IPv6's own unspecified and loopback addresses, judged as such.
  if (zeroUpTo(6) && g[6] !== 0) return [ipv4Of(g[6]!, g[7]!)];
  if (zeroUpTo(5) && g[5] === 0xffff) return [ipv4Of(g[6]!, g[7]!)];
  if (zeroUpTo(4) && g[4] === 0xffff && g[5] === 0) return [ipv4Of(g[6]!, g[7]!)];
  if (g[0] === 0x64 && g[1] === 0xff9b && g[2] === 0) return [ipv4Of(g[6]!, g[7]!)];
  if (g[0] === 0x64 && g[1] === 0xff9b && g[2] === 1) {
    // RFC 6052 skips bits 64-71 (the "u" octet): /48 puts the address around it, /56 and /64
    // after it. A candidate in 0.0.0.0/8 is the zero bits of a longer prefix, not an address.
    return [
      ipv4Of(g[3]!, ((g[4]! & 0xff) << 8) | (g[5]! >> 8)),
      ipv4Of(((g[3]! & 0xff) << 8) | (g[4]! & 0xff), g[5]!),
      ipv4Of(((g[4]! & 0xff) << 8) | (g[5]! >> 8), ((g[5]! & 0xff) << 8) | (g[6]! >> 8)),
      ipv4Of(g[6]!, g[7]!),
    ].filter((candidate) => !candidate.startsWith("0."));
  }
  if (g[0] === 0x2002) return [ipv4Of(g[1]!, g[2]!)];
  if (g[0] === 0x2001 && g[1] === 0) return [ipv4Of(g[2]!, g[3]!), ipv4Of(g[6]! ^ 0xffff, g[7]! ^ 0xffff)];
  return [];
}

/** Why an address may not receive webhooks, or undefined when it may. */
export function refusalOf(address: string): string | undefined {
  const family = isIP(address) === 6 ? "ipv6" : "ipv4";
  if (ALWAYS_REFUSED.check(address, family)) return `${address} is a link-local, metadata or reserved address`;
  if (!config.webhooks.allowPrivateNetworks && PRIVATE.check(address, family)) {
    return `${address} is a loopback or private address (set WEBHOOK_ALLOW_PRIVATE_NETWORKS to allow it)`;
  }
  if (family === "ipv6") {
    for (const inner of embeddedIpv4(address)) {
      const reason = refusalOf(inner);
      if (reason) return `${address}, which carries ${reason}`;
    }
  }
  return undefined;
}

/** Parses and checks a webhook URL, resolving its host now; throws validation_failed naming the reason. */
export async function checkWebhookUrl(raw: string): Promise<WebhookTarget> {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw refused(`"${raw}" is not a URL`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw refused(`only http and https are allowed, got ${url.protocol}`);
  if (url.username || url.password) throw refused("must not hold credentials");
  const host = url.hostname.replace(/^\[|\]$/g, "");
  let addresses: string[];
  if (isIP(host)) addresses = [host];
  else {
    try {
      addresses = (await lookup(host, { all: true, verbatim: true })).map((entry) => entry.address);
    } catch {
      throw refused(`${host} does not resolve`);
    }
  }
  if (addresses.length === 0) throw refused(`${host} does not resolve`);
  for (const address of addresses) {
    const reason = refusalOf(address);
    if (reason) throw refused(`${host} resolves to ${reason}`);
  }
  return { url, address: addresses[0]! };
}
