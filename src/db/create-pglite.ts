/**
 * Makes a new embedded database in the folder it is given, its migrations applied, then exits:
 * `bun src/db/create-pglite.ts <dataDir>`. Run by openPglite (client.ts) as a process of its own:
 * PostgreSQL's initdb in PGlite takes some 900 MB at its peak, and the allocator gives memory back
 * slowly, so a Parley that made its database itself still held some 30 MB more 20 s later than
 * one that opened a database already made.
 */
import { PGlite } from "@electric-sql/pglite";
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm";
import { drizzle } from "drizzle-orm/pglite";
import { migrate } from "drizzle-orm/pglite/migrator";
import { migrationsFolder } from "./migrate";

const dataDir = process.argv[2];
if (!dataDir) {
  console.error("usage: bun src/db/create-pglite.ts <dataDir>");
  process.exit(2);
}
const made = await PGlite.create(dataDir, { extensions: { pg_trgm } });
await migrate(drizzle(made), { migrationsFolder });
await made.close();
