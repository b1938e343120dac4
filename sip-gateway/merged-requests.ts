/**
 * sip.js checks every new INVITE for a merged request (RFC 3261 8.2.2.2: the same From tag,
 * Call-ID and CSeq on another branch) by scanning all its server transactions, and over UDP
 * those live 32 s after the call's answer and its BYE (timers L and J). At a few hundred
 * calls a second that is tens of thousands of transactions scanned per INVITE, a cost
 * growing with the square of the call rate. This Bun plugin has the scan ask the
 * transaction map for the only candidates, those of the same Call-ID and From tag, when the
 * map is a `ServerTransactions`; the check itself is unchanged. Like the grammar cache, it
 * must be registered before sip.js is first loaded.
 */
import { plugin } from "bun";
import { log } from "../src/core/log";

const SCAN = "Array.from(this.userAgentServers.values()).some(";
const CANDIDATES = "(this.userAgentServers.candidates?.(message) ?? Array.from(this.userAgentServers.values())).some(";

interface ServerTransaction {
  transaction: { request: { callId: string; fromTag?: string } };
}

const keyOf = (request: { callId: string; fromTag?: string }) => `${request.callId}\n${request.fromTag ?? ""}`;

/** A sip.js core's server transactions by id, also indexed by Call-ID and From tag. */
export class ServerTransactions<V extends ServerTransaction> extends Map<string, V> {
  private readonly byCall = new Map<string, Set<V>>();

  override set(id: string, server: V): this {
    const previous = super.get(id);
    if (previous) this.unindex(previous);
    super.set(id, server);
    const key = keyOf(server.transaction.request);
    const servers = this.byCall.get(key);
    if (servers) servers.add(server);
    else this.byCall.set(key, new Set([server]));
    return this;
  }

  override delete(id: string): boolean {
    const server = super.get(id);
    if (server) this.unindex(server);
    return super.delete(id);
  }

  override clear(): void {
    this.byCall.clear();
    super.clear();
  }

  /** The transactions a request could have been merged with. */
  candidates(request: { callId: string; fromTag?: string }): V[] {
    const servers = this.byCall.get(keyOf(request));
    return servers ? [...servers] : [];
  }

  private unindex(server: V): void {
    const key = keyOf(server.transaction.request);
    const servers = this.byCall.get(key);
    servers?.delete(server);
    if (servers?.size === 0) this.byCall.delete(key);
  }
}

plugin({
  name: "sip.js merged-request index",
  setup(build) {
    build.onLoad(
      { filter: /sip\.js[\\/]lib[\\/]core[\\/]user-agent-core[\\/]user-agent-core\.js$/ },
      async ({ path }) => {
        const source = await Bun.file(path).text();
        if (!source.includes(SCAN)) {
          log.warn(
            { path },
            "sip: sip.js user agent core changed shape; the merged-request check scans every transaction",
          );
          return { contents: source, loader: "js" };
        }
        return { contents: source.replace(SCAN, CANDIDATES), loader: "js" };
      },
    );
  },
});
