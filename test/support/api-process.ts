/**
 * One API process of Parley (`--role=api`) on a free loopback port,
 * for tests that need several processes sharing PostgreSQL and Redis.
 */
import type { Subprocess } from "bun";
import { freePort } from "./ports";

export interface ApiProcess {
  http: string;
  ws: string;
  child: Subprocess;
}

/** Starts the process with the test's environment plus `extraEnv`; resolves once /healthz answers. */
export async function startApiProcess(extraEnv: Record<string, string> = {}): Promise<ApiProcess> {
  const port = await freePort();
  const child = Bun.spawn([process.execPath, "src/index.ts", "--role=api"], {
    env: { ...process.env, PORT: String(port), HOST: "127.0.0.1", LOG_LEVEL: "silent", ...extraEnv },
    stdout: "ignore",
    stderr: "inherit",
  });
  // A start takes well under a second on an idle machine; the ceiling is for a machine running two suites.
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline && child.exitCode === null) {
    const up = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(2_000) }).then(
      (response) => response.ok,
      () => false,
    );
    if (up) return { http: `http://127.0.0.1:${port}`, ws: `ws://127.0.0.1:${port}`, child };
    await Bun.sleep(100);
  }
  child.kill("SIGKILL");
  throw new Error(
    child.exitCode === null ? "API process did not answer within 60 s" : `API process exited with ${child.exitCode}`,
  );
}
