/**
 * Where a webhook may be sent. A URL is checked when an endpoint is saved and again before
 * every attempt, against every address its host resolves to then (a name may be rebound to
 * an internal address after it was checked). Loopback and private networks are refused
 * unless WEBHOOK_ALLOW_PRIVATE_NETWORKS is set; link-local, cloud metadata and other
 * special addresses are refused always.
 */
import { lookup } from "node:dns/promises";
import { BlockList, isIP } from "node:net";
import { config } from "../../config";
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

/** Why an address may not receive webhooks, or undefined when it may. */
export function refusalOf(address: string): string | undefined {
  const family = isIP(address) === 6 ? "ipv6" : "ipv4";
  if (ALWAYS_REFUSED.check(address, family)) return `${address} is a link-local, metadata or reserved address`;
  if (!config.webhooks.allowPrivateNetworks && PRIVATE.check(address, family)) {
    return `${address} is a loopback or private address (set WEBHOOK_ALLOW_PRIVATE_NETWORKS to allow it)`;
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
