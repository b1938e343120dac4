/**
 * A real S3-compatible server for tests: s3rver on a free loopback port, run by Node in a
 * child process, with one bucket. Sets the S3_* variables before Parley reads its config,
 * so import this before anything from src/.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "./ports";

export const S3_BUCKET = "parley-test";

export async function startS3rver() {
  const port = await freePort();
  const directory = mkdtempSync(join(tmpdir(), "parley-s3-"));
  const child = Bun.spawn(
    ["node", "node_modules/.bin/s3rver", "-d", directory, "-a", "127.0.0.1", "-p", String(port), "-s", "--configure-bucket", S3_BUCKET],
    { stdout: "ignore", stderr: "inherit" },
  );
  const endpoint = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 100; i++) {
    const up = await fetch(`${endpoint}/${S3_BUCKET}`).then(
      () => true,
      () => false,
    );
    if (up) break;
    await Bun.sleep(100);
  }
  return {
    endpoint,
    env: {
      S3_ENDPOINT: endpoint,
      S3_BUCKET,
      S3_REGION: "us-east-1",
      S3_ACCESS_KEY_ID: "S3RVER",
      S3_SECRET_ACCESS_KEY: "S3RVER",
      S3_FORCE_PATH_STYLE: "true",
    },
    stop: () => child.kill(),
  };
}
