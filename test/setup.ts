/**
 * Preloaded before every test file: points Parley at the test PostgreSQL and Redis,
 * rebuilds the test database from the migrations once per file (unless the parallel runner
 * gave it a fresh copy), gives the run its own Redis key prefix so parallel runs never meet,
 * and starts a real S3 server (s3rver).
 */
import { afterAll, setDefaultTimeout } from "bun:test";
import { bucketOnShared, startS3rver } from "./support/s3rver";

// Tests that start real processes (servers, ffmpeg, sipp) need more than bun's 5 s.
setDefaultTimeout(30_000);

// Tests never touch DATABASE_URL's database: only TEST_DATABASE_URL's, which is wiped here.
process.env.DATABASE_URL = process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
process.env.REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";
process.env.REDIS_PREFIX = `parley-test-${process.pid}`;
process.env.LOG_LEVEL ??= "silent";
process.env.BOOTSTRAP_ACCOUNT = "false";
// Every test then signs with keys sealed at rest, as a production deployment should.
process.env.SIGNING_KEY_SECRET = "parley-test-sealing-secret";
// Webhook receivers in tests listen on loopback, and a receiver that is down is retried within seconds.
process.env.WEBHOOK_ALLOW_PRIVATE_NETWORKS ??= "true";
process.env.WEBHOOK_RETRY_SCHEDULE ??= "1,1,1,1,2,2,2,2,2,2,2,2";
// Operators' passwords hashed at 1 MiB rather than 64: still argon2id, verified the same way, but
// the dozens of sign-ins of the console tests would otherwise spend seconds of CPU in the hash.
process.env.OPERATOR_PASSWORD_MEMORY_KIB ??= "1024";
// Four connections per process, for this process and every Parley it starts, rather than ten: a
// suite's processes held up to 51 of the shared server's 100 at once, so a second suite on the
// machine was refused connections ("too many clients").
process.env.DATABASE_POOL_SIZE ??= "4";
// No metrics listener unless a test gives its Parley a port of its own (test/support/parley.ts does): a
// start whose METRICS_PORT is taken is refused, and the fixed default would be shared by test files in parallel.
process.env.METRICS_PORT ??= "0";

// Parley reads its configuration once, so the real S3 server must be up before that.
const shared = process.env.TEST_S3_ENDPOINT;
delete process.env.TEST_S3_ENDPOINT;
const s3 = shared ? await bucketOnShared(shared) : await startS3rver();
Object.assign(process.env, s3.env);

// The driver loads here first, so with the fix Parley's own handle applies to it (src/db/client.ts).
await import("../src/db/postgres-write-guard");
// The test file's process is built as an API process's is (src/process/root.ts): the database, Redis,
// publish/subscribe, the outbox and the broker, put in place for the modules the tests import.
const { buildProcess } = await import("../src/process/root");
await buildProcess("api");
// The parallel runner (.ci/parallel-test.ts) hands each file a database just copied from (or emptied
// back to) the template it migrated for the run: nothing to wipe and no migration to apply, whose
// check would cost every file a tenth of a second. Read once, so no process a test starts takes it for its own.
const fresh = process.env.TEST_DATABASE_FRESH === "true";
delete process.env.TEST_DATABASE_FRESH;
if (!fresh) {
  const { default: postgres } = await import("postgres");
  const admin = postgres(process.env.DATABASE_URL, { max: 1, onnotice: () => {} });
  await admin.unsafe(
    "drop schema if exists public cascade; drop schema if exists drizzle cascade; create schema public;",
  );
  await admin.end();
  const { migrate } = await import("../src/db/migrate");
  await migrate();
}

afterAll(async () => {
  s3.stop();
  const { redis } = await import("../src/queue/connection");
  const keys = await redis().keys(`${process.env.REDIS_PREFIX}:*`);
  if (keys.length > 0) await redis().del(...keys);
});
