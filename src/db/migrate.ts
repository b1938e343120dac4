/** Applies the generated migrations in drizzle/. Run on start and by `bun run migrate`. */
import { fileURLToPath } from "node:url";
import { loadProcessConfig } from "../core/config";

export const migrationsFolder = fileURLToPath(new URL("../../drizzle", import.meta.url));

export async function migrate(): Promise<void> {
  // Imported here: the client loads the drivers' modules, after `bun run migrate` checked the environment.
  const { database } = await import("./client");
  if (database.kind === "pglite") {
    const { migrate: run } = await import("drizzle-orm/pglite/migrator");
    await run(database.db as never, { migrationsFolder });
  } else {
    const { migrate: run } = await import("drizzle-orm/postgres-js/migrator");
    await run(database.db as never, { migrationsFolder });
  }
}

if (import.meta.main) {
  if (!loadProcessConfig()) process.exit(2);
  const { openDatabase, useDatabase } = await import("./client");
  const database = await openDatabase();
  useDatabase(database);
  await migrate();
  await database.close();
  console.log("parley: migrations applied");
}
