/** Applies the generated migrations in drizzle/. Run on start and by `bun run migrate`. */
import { fileURLToPath } from "node:url";
import { database } from "./client";

const migrationsFolder = fileURLToPath(new URL("../../drizzle", import.meta.url));

export async function migrate(): Promise<void> {
  if (database.kind === "pglite") {
    const { migrate: run } = await import("drizzle-orm/pglite/migrator");
    await run(database.db as never, { migrationsFolder });
  } else {
    const { migrate: run } = await import("drizzle-orm/postgres-js/migrator");
    await run(database.db as never, { migrationsFolder });
  }
}

if (import.meta.main) {
  await migrate();
  await database.close();
  console.log("parley: migrations applied");
}
