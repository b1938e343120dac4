/** Applies the generated migrations in drizzle/. Run on start and by `bun run migrate`. */
import { fileURLToPath } from "node:url";
import { loadProcessConfig } from "../core/config";

export const migrationsFolder = fileURLToPath(new URL("../../drizzle", import.meta.url));

export async function migrate(): Promise<void> {
  // Imported here: the client opens the database as it loads, after `bun run migrate` checked the environment.
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
  await migrate();
  await (await import("./client")).database.close();
  console.log("parley: migrations applied");
}
