/**
 * A real S3-compatible server for tests: s3rver on a free loopback port, run by Node in a
 * child process, with one bucket; or, under the parallel runner, a bucket of the file's own on
 * the one s3rver the runner started for the run (`TEST_S3_ENDPOINT`), which saves every file
 * Node's start and s3rver's load. Sets the S3_* variables before Parley reads its config, so
 * import this before anything from src/.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "./ports";

export const S3_BUCKET = "parley-test";

const settings = (endpoint: string, bucket: string) => ({
  S3_ENDPOINT: endpoint,
  S3_BUCKET: bucket,
  S3_REGION: "us-east-1",
  S3_ACCESS_KEY_ID: "S3RVER",
  S3_SECRET_ACCESS_KEY: "S3RVER",
  S3_FORCE_PATH_STYLE: "true",
});

/** A bucket named after this process on the run's shared s3rver: files never see each other's objects. */
export async function bucketOnShared(endpoint: string) {
  const bucket = `${S3_BUCKET}-${process.pid}`;
  const created = await fetch(`${endpoint}/${bucket}`, { method: "PUT", signal: AbortSignal.timeout(10_000) });
  if (!created.ok) throw new Error(`creating bucket ${bucket} on ${endpoint} answered ${created.status}`);
  return { endpoint, env: settings(endpoint, bucket), stop: () => {} };
}

export async function startS3rver() {
  const port = await freePort();
  const directory = mkdtempSync(join(tmpdir(), "parley-s3-"));
  const child = Bun.spawn(
    [
      "node",
      "node_modules/.bin/s3rver",
      "-d",
      directory,
      "-a",
      "127.0.0.1",
      "-p",
      String(port),
      "-s",
      "--configure-bucket",
      S3_BUCKET,
    ],
    { stdout: "ignore", stderr: "inherit" },
  );
  const endpoint = `http://127.0.0.1:${port}`;
  // Node loading s3rver takes a second or so; the ceiling is for a machine running two suites.
  const deadline = Date.now() + 60_000;
  for (;;) {
    const up = await fetch(`${endpoint}/${S3_BUCKET}`, { signal: AbortSignal.timeout(2_000) }).then(
      () => true,
      () => false,
    );
    if (up) break;
    if (Date.now() > deadline || child.exitCode !== null) {
      child.kill();
      throw new Error(`s3rver on port ${port} did not answer within 60 s (exit code ${child.exitCode})`);
    }
    await Bun.sleep(100);
  }
  return {
    endpoint,
    env: settings(endpoint, S3_BUCKET),
    stop: () => child.kill(),
  };
}
