/**
 * One Parley per port: a second one started on a port a Parley serves is refused, naming
 * the process that holds it, on the embedded database and on PostgreSQL (where the first
 * one's pool of API processes shares the port); a Parley killed outright (the embedded one,
 * after that) does not keep the next start from the port.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Parley, startParley } from "./support/parley";
import { childPids, until } from "./support/wait";

const entry = new URL("../src/index.ts", import.meta.url).pathname;

/** Parley started by hand with the first one's settings and these changes; its exit code and what it said. */
async function startAnother(first: Parley, changes: Record<string, string>, withinMs = 30_000) {
  const child = Bun.spawn([process.execPath, entry], {
    env: { ...first.env, ...changes },
    stdout: "pipe",
    stderr: "pipe",
    stdin: "ignore",
  });
  const killer = setTimeout(() => child.kill("SIGKILL"), withinMs);
  const [stdout, stderr, code] = await Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
    child.exited,
  ]);
  clearTimeout(killer);
  return { code, said: stdout + stderr };
}

for (const mode of [
  { name: "the embedded database", embedded: true, processes: "1" },
  { name: "PostgreSQL", embedded: false, processes: "2" },
]) {
  describe(`one Parley per port, on ${mode.name}`, () => {
    let first: Parley | undefined;
    const spare = mkdtempSync(join(tmpdir(), "parley-second-"));

    afterAll(async () => {
      await first?.close();
      rmSync(spare, { recursive: true, force: true });
    });

    test("a second Parley on the port is refused, naming the first one's process and data", async () => {
      first = await startParley({
        embedded: mode.embedded,
        env: { SIP_ENABLED: "false", API_PROCESSES: mode.processes },
      });
      if (!mode.embedded) {
        // The pool itself shares the port: both API processes of the first Parley listen.
        await until(
          () => Promise.resolve(childPids(first!.process.pid, "api").length),
          (count) => count === 2,
          15_000,
        );
      }
      const second = await startAnother(first, {
        DATA_DIR: spare,
        REDIS_PREFIX: `parley-test-second-${crypto.randomUUID()}`,
      });
      expect(second.code).toBe(1);
      const store = mode.embedded
        ? `data folder ${first.dataDir}`
        : `database ${new URL(first.env.DATABASE_URL!).host}${new URL(first.env.DATABASE_URL!).pathname}`;
      expect(second.said).toContain(`parley: port ${first.port} is already in use, held by pid ${first.process.pid} (`);
      expect(second.said).toContain(`src/index.ts; in `);
      expect(second.said).toContain(store);
      expect(second.said).toContain("start this Parley with another PORT");
      // Refused before it opened anything: its data folder is untouched.
      expect(readdirSync(spare)).toEqual([]);
      expect((await fetch(`${first.base}/readyz`, { keepalive: false })).status).toBe(200);
    }, 90_000);

    // On the embedded Parley that just refused a second one: a start of its own costs seconds of PGlite.
    if (mode.embedded)
      test("a Parley killed outright does not keep the next start on its port and folder from serving", async () => {
        // Its own only when the test before failed to start one.
        first ??= await startParley({ embedded: true, env: { SIP_ENABLED: "false" } });
        const killed = first;
        expect(await killed.stop("SIGKILL", 5_000)).not.toBe("still running");
        const again = Bun.spawn([process.execPath, entry], {
          env: killed.env,
          stdout: "ignore",
          stderr: "ignore",
          stdin: "ignore",
        });
        try {
          const ready = await until(
            () =>
              fetch(`${killed.base}/readyz`, { keepalive: false }).then(
                (response) => response.status,
                () => 0,
              ),
            (status) => status === 200,
            60_000,
          );
          expect(ready).toBe(200);
        } finally {
          again.kill("SIGTERM");
          await again.exited;
        }
      }, 90_000);
  });
}
