/**
 * How fast the SIP gateway's look-up (`conferenceForMapperId`) and the dial-in page's
 * create-or-return (`mapperIdFor`) answer, as ratios to a bare `select 1` round trip on the
 * same connection pool in the same run. Run by hand:
 *   TEST_DATABASE_URL=postgres://... bun test/bench/mapper.bench.ts
 */
// The database is set before Parley reads its configuration, hence the dynamic imports below.
export {};

process.env.DATABASE_URL = process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
process.env.LOG_LEVEL ??= "silent";

const { sql } = await import("drizzle-orm");
const { db } = await import("../../src/db/client");
// Built as an API process is (src/process/root.ts): the database, Redis and the rest put in place.
const services = await (await import("../../src/process/root")).buildProcess("api");
const { migrate } = await import("../../src/db/migrate");
const { createAccount } = await import("../../src/modules/accounts/service");
const { conferenceForMapperId, mapperIdFor } = await import("../../src/modules/mapper/service");

const ROUNDS = 2_000;
const CONCURRENCY = 8;

async function timed(label: string, run: (i: number) => Promise<unknown>): Promise<number> {
  for (let i = 0; i < 100; i++) await run(i);
  const started = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < ROUNDS) await run(next++);
    }),
  );
  const perSecond = ROUNDS / ((performance.now() - started) / 1000);
  console.log(`${label.padEnd(36)} ${perSecond.toFixed(0).padStart(8)} /s`);
  return perSecond;
}

await migrate();
const { account } = await createAccount(`bench-${Date.now()}`, "EdDSA");
const ids: number[] = [];
for (let i = 0; i < 500; i++) ids.push(await mapperIdFor(account.id, `bench-${i}@conference.bench.example.com`));

const reference = await timed("select 1 (reference)", () => db.execute(sql`select 1`));
const lookup = await timed("conferenceForMapperId (existing)", (i) => conferenceForMapperId(ids[i % ids.length]!));
const existing = await timed("mapperIdFor (existing mapping)", (i) =>
  mapperIdFor(account.id, `bench-${i % ids.length}@conference.bench.example.com`),
);
const created = await timed("mapperIdFor (new mapping)", (i) =>
  mapperIdFor(account.id, `new-${Date.now()}-${i}@conference.bench.example.com`),
);

console.log(
  `ratios to select 1: lookup ${(lookup / reference).toFixed(2)}, existing ` +
    `${(existing / reference).toFixed(2)}, new ${(created / reference).toFixed(2)}`,
);
await services.stop();
