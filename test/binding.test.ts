/**
 * What a Parley started with no address settings binds: the API (TCP), the SIP gateway (UDP
 * and TCP) and the metrics all on loopback, as its log says, read from the kernel's socket
 * tables rather than from Parley's own account.
 */
import { expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { migratedDataDir } from "./support/parley";
import { freePort } from "./support/ports";
import { until } from "./support/wait";

const ENTRY = resolve(import.meta.dir, "../src/index.ts");

/** The local IPv4 addresses the kernel lists for sockets on `port` (listening TCP, or bound UDP). */
function boundAddresses(protocol: "tcp" | "udp", port: number): string[] {
  const found: string[] = [];
  for (const line of readFileSync(`/proc/net/${protocol}`, "utf8").split("\n").slice(1)) {
    const fields = line.trim().split(/\s+/);
    if (fields.length < 4 || (protocol === "tcp" && fields[3] !== "0A")) continue;
    const [address, hexPort] = fields[1]!.split(":") as [string, string];
    if (Number.parseInt(hexPort, 16) !== port) continue;
    // Little-endian hex: 0100007F is 127.0.0.1.
    found.push(
      (address.match(/../g) ?? [])
        .reverse()
        .map((byte) => Number.parseInt(byte, 16))
        .join("."),
    );
  }
  return found;
}

test("with no HOST or SIP_BIND_ADDRESS, the API, SIP and metrics bind loopback only, and the log says so", async () => {
  const dataDir = mkdtempSync(join(tmpdir(), "parley-binding-"));
  await migratedDataDir(dataDir);
  const [port, sipPort, metricsPort] = [await freePort(), await freePort(), await freePort()];
  const output: string[] = [];
  const child = Bun.spawn([process.execPath, ENTRY], {
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: dataDir,
      DATA_DIR: dataDir,
      PORT: String(port),
      SIP_UDP_PORT: String(sipPort),
      SIP_TCP_PORT: String(sipPort),
      METRICS_PORT: String(metricsPort),
      REDIS_URL: process.env.REDIS_URL!,
      REDIS_PREFIX: `parley-test-binding-${crypto.randomUUID()}`,
    },
    stdout: "pipe",
    stderr: "pipe",
    stdin: "ignore",
  });
  for (const stream of [child.stdout, child.stderr])
    (async () => {
      for await (const chunk of stream) output.push(new TextDecoder().decode(chunk));
    })();
  try {
    const said = await until(
      () => output.join(""),
      (text) => text.includes('"msg":"api listening"') && text.includes('"msg":"sip gateway listening"'),
      60_000,
    );
    expect(said).toMatch(/"host":"127\.0\.0\.1","port":\d+,"msg":"api listening"/);
    expect(said).toContain('"address":"127.0.0.1","msg":"sip gateway listening"');
    expect(boundAddresses("tcp", port)).toEqual(["127.0.0.1"]);
    expect(boundAddresses("udp", sipPort)).toEqual(["127.0.0.1"]);
    expect(boundAddresses("tcp", sipPort)).toEqual(["127.0.0.1"]);
    expect(boundAddresses("tcp", metricsPort)).toEqual(["127.0.0.1"]);
  } finally {
    child.kill("SIGTERM");
    await Promise.race([child.exited, Bun.sleep(15_000)]);
    child.kill("SIGKILL");
    rmSync(dataDir, { recursive: true, force: true });
  }
}, 90_000);
