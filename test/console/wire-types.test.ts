/**
 * The console's pages take their wire types from the API: a field renamed in a module's model
 * (or in a service's answer) fails `tsc` on the page that reads it. Checked on a copy of src/
 * with one field of every page's reads renamed, type checked by the project's own compiler.
 */
import { expect, test } from "bun:test";
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "../..");

/** In `file`, `from` (found exactly once) becomes `to`; the page must then fail on `field`. */
const RENAMES = [
  {
    file: "src/modules/chat/model.ts",
    from: "inserted_at: t.String(",
    to: "posted_at: t.String(",
    page: "pages/chat.ts",
    field: "inserted_at",
  },
  {
    file: "src/modules/usage/model.ts",
    from: 'room_name: t.String({ description: "Room name" })',
    to: 'room: t.String({ description: "Room name" })',
    page: "pages/usage.ts",
    field: "room_name",
  },
  {
    file: "src/modules/scheduler/model.ts",
    from: "timezone: t.String({\n",
    to: "zone: t.String({\n",
    page: "pages/scheduler.ts",
    field: "timezone",
  },
  {
    file: "src/modules/webhooks/model.ts",
    from: "disabled_reason: t.Union(",
    to: "disabled_why: t.Union(",
    page: "pages/webhooks.ts",
    field: "disabled_reason",
  },
  {
    file: "src/modules/mapper/service.ts",
    from: "  formattedNumber: string;",
    to: "  formatted: string;",
    page: "pages/phone.ts",
    field: "formattedNumber",
  },
  {
    file: "src/modules/accounts/service.ts",
    from: "    apiKeys: keys",
    to: "    keys: keys",
    page: "pages/accounts.ts",
    field: "apiKeys",
  },
  {
    file: "src/modules/console/service.ts",
    from: "  stream_name: string;",
    to: "  name: string;",
    page: "pages/streams.ts",
    field: "stream_name",
  },
  {
    file: "src/modules/console/service.ts",
    from: "    rooms_open: number;",
    to: "    open_rooms: number;",
    page: "pages/overview.ts",
    field: "rooms_open",
  },
  {
    file: "src/modules/console/model.ts",
    from: 'csrf_token: t.String({ description: "Send as',
    to: 'csrf: t.String({ description: "Send as',
    page: "api.ts",
    field: "csrf_token",
  },
];

test("a field renamed in the API's models or answers fails tsc on every console page that reads it", () => {
  const copy = mkdtempSync(join(tmpdir(), "parley-wire-types-"));
  try {
    cpSync(join(ROOT, "src"), join(copy, "src"), { recursive: true });
    symlinkSync(join(ROOT, "node_modules"), join(copy, "node_modules"));
    const tsconfig = JSON.parse(readFileSync(join(ROOT, "tsconfig.json"), "utf8"));
    // The pages and what they import: a page's errors are the same as in a check of all of src/.
    writeFileSync(join(copy, "tsconfig.json"), JSON.stringify({ ...tsconfig, include: ["src/modules/console/ui"] }));
    for (const rename of RENAMES) {
      const path = join(copy, rename.file);
      const source = readFileSync(path, "utf8");
      expect(source.split(rename.from).length - 1, `${rename.file} holds "${rename.from}" once`).toBe(1);
      writeFileSync(path, source.replace(rename.from, rename.to));
    }
    const tsc = Bun.spawnSync([join(ROOT, "node_modules/.bin/tsc"), "--noEmit", "-p", copy], {
      cwd: copy,
      timeout: 120_000,
    });
    const output = tsc.stdout.toString() + tsc.stderr.toString();
    expect(tsc.exitCode).not.toBe(0);
    for (const rename of RENAMES) {
      const failures = output
        .split("\n")
        .filter(
          (line) => line.startsWith(`src/modules/console/ui/${rename.page}(`) && line.includes(`'${rename.field}'`),
        );
      expect(failures.length, `${rename.page} fails on ${rename.field}:\n${output}`).toBeGreaterThan(0);
    }
  } finally {
    rmSync(copy, { recursive: true, force: true });
  }
}, 150_000);
