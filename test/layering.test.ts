/**
 * The layering check of .ci/layering.ts fails the build on a violation: it fails on a copy of
 * this checkout with a feature import in infrastructure, an import cycle made of type-only
 * imports, a feature importing another feature's inner file rather than its index.ts, or a
 * feature importing the process files (src/process, the composition root), and
 * it lets the same feature's index be imported. That it passes on the checkout itself is CI's
 * own step (.ci/test runs it before the tests), not run a second time here.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { appendFileSync, cpSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const repo = resolve(import.meta.dir, "..");
const copies: string[] = [];

function check(root: string): { code: number; output: string } {
  const run = Bun.spawnSync([process.execPath, join(repo, ".ci", "layering.ts"), root], { timeout: 90_000 });
  return { code: run.exitCode ?? -1, output: `${run.stdout.toString()}${run.stderr.toString()}` };
}

/** A copy of the source trees the check reads. */
function copyOfRepo(): string {
  const root = mkdtempSync(join(tmpdir(), "parley-layering-test-"));
  copies.push(root);
  for (const path of ["src", "workers", "sip-gateway", "drizzle/schema.ts"])
    cpSync(join(repo, path), join(root, path), { recursive: true });
  return root;
}

afterEach(() => {
  for (const root of copies.splice(0)) rmSync(root, { recursive: true, force: true });
});

describe("layering check", () => {
  // One copy holds every case: the check reads the whole tree in one pass of several seconds, and names each violation.
  test("a feature in infrastructure, a type-only cycle, a deep import, the process from below: each fails", () => {
    const root = copyOfRepo();
    // The console may use streaming's index, never a file behind it.
    appendFileSync(
      join(root, "src/modules/console/service.ts"),
      '\nexport { stopStream } from "../streaming/control";\n',
    );
    appendFileSync(join(root, "src/modules/console/sessions.ts"), '\nexport { recentStreams } from "../streaming";\n');
    appendFileSync(join(root, "src/http/metrics.ts"), '\nexport { issueToken } from "../modules/token/service";\n');
    // A feature that builds a process of its own reaches up to the composition root.
    appendFileSync(join(root, "sip-gateway/role.ts"), '\nexport { buildProcess } from "../src/process/root";\n');
    appendFileSync(join(root, "src/core/room-key.ts"), '\nexport type { Running } from "./lifecycle";\n');
    appendFileSync(
      join(root, "src/core/lifecycle.ts"),
      '\nimport type { roomKey } from "./room-key";\nexport type RoomKeyOf = typeof roomKey;\n',
    );
    const { code, output } = check(root);
    expect(code).not.toBe(0);
    expect(output).toContain("infrastructure-imports-no-feature: src/http/metrics.js → src/modules/token/service.js");
    expect(output).toMatch(/no-cycle: src\/core\/(room-key|lifecycle)\.js/);
    expect(output).toContain("src/core/room-key.js");
    expect(output).toContain(
      "features-meet-through-their-index: src/modules/console/service.js → src/modules/streaming/control.js",
    );
    expect(output).toContain("process-is-the-top: sip-gateway/role.js → src/process/root.js");
    expect(output).not.toContain("src/modules/console/sessions.js");
  });
});
