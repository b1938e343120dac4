/**
 * The webhooks worker reads the event catalogue through its index (src/modules/catalogue),
 * and that index leaves out the HTTP side (the event log's routes, the socket topic): a
 * webhooks process loads neither Elysia nor the TypeBox models (docs/testing.md has what
 * that saves at start).
 */
import { expect, test } from "bun:test";
import { resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "../..");

/** The node_modules packages a fresh Bun has loaded once it imported `entry`. */
function packagesLoadedBy(entry: string): string[] {
  const probe = `
    await import(${JSON.stringify(entry)});
    const names = Object.keys(require.cache).map((path) => /node_modules\\/((?:@[^/]+\\/)?[^/]+)/.exec(path)?.[1]);
    console.log(JSON.stringify([...new Set(names.filter(Boolean))]));
    process.exit(0);`;
  const run = Bun.spawnSync([process.execPath, "--eval", probe], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/tmp" },
    timeout: 30_000,
  });
  expect(run.stderr.toString()).toBe("");
  return JSON.parse(run.stdout.toString().trim().split("\n").at(-1)!);
}

test("the webhooks worker loads neither Elysia nor TypeBox, the catalogue's routes do", () => {
  const worker = packagesLoadedBy(resolve(ROOT, "src/modules/webhooks/worker.ts"));
  expect(worker).toContain("drizzle-orm");
  expect(worker.filter((name) => name === "elysia" || name === "@sinclair/typebox")).toEqual([]);
  // The probe would see them: the catalogue's HTTP side loads both.
  expect(packagesLoadedBy(resolve(ROOT, "src/modules/catalogue/routes.ts"))).toContain("elysia");
}, 60_000);
