/**
 * The SDK stays true to the server: its generated types are what openapi-typescript makes of
 * the app's OpenAPI description now, its error codes are the server's, and its runtime (the
 * package's code and its dependencies, as a browser bundle) stays under 20 KB gzipped.
 */
import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { generateTypes, TYPES_FILE } from "../../.ci/sdk/generate-types";
import type { ErrorCode } from "../../src/core/errors";
import type { ParleyErrorCode } from "../../src/sdk/index";
import { sdkBuild } from "../support/sdk-package";

test("src/sdk/generated/openapi.ts is what the running app describes (npm run build:sdk writes it)", async () => {
  expect(readFileSync(TYPES_FILE, "utf8") === (await generateTypes())).toBe(true);
}, 60_000);

type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
// Checked by tsc: the type is `false`, and this line an error, when the two lists part.
const codesAgree: Same<ErrorCode, ParleyErrorCode> = true;

test("the SDK's error codes are the server's (a type check; tsc fails when they part)", () => {
  expect(codesAgree).toBe(true);
});

test("the SDK's runtime, bundled for a browser with its dependencies, is under 20 KB gzipped", async () => {
  const { folder } = await sdkBuild();
  const bundle = await Bun.build({ entrypoints: [join(folder, "index.js")], target: "browser", minify: true });
  expect(bundle.success).toBe(true);
  const code = await bundle.outputs[0]!.text();
  const gzipped = Bun.gzipSync(new TextEncoder().encode(code)).length;
  console.log(`sdk runtime: ${code.length} bytes minified, ${gzipped} bytes gzipped`);
  expect(gzipped).toBeLessThan(20 * 1024);
}, 180_000);
