/**
 * What costs a test seconds to make and is the same for every test that wants it (a migrated
 * embedded database, an initdb, the packed SDK): a folder under node_modules/.cache, named by
 * the caller after what it is made from, made once per checkout and set of inputs.
 */
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";

const CACHE = resolve(import.meta.dir, "../../node_modules/.cache");
/** One making per folder in a process, so two tests of one file never build into the same place. */
const making = new Map<string, Promise<string>>();

/**
 * The folder `name` under node_modules/.cache, made by `make` when missing. `make` builds it in a
 * place of this process's own beside it (which it creates), renamed into place when whole: a test
 * in another process never reads half of one, and when another process renamed its own first,
 * made from the same inputs, that one serves.
 */
export function madeOnce(name: string, make: (building: string) => void | Promise<void>): Promise<string> {
  let made = making.get(name);
  if (!made) {
    made = (async () => {
      const done = join(CACHE, name);
      if (existsSync(done)) return done;
      mkdirSync(CACHE, { recursive: true });
      const building = `${done}.${process.pid}`;
      rmSync(building, { recursive: true, force: true });
      try {
        await make(building);
        renameSync(building, done);
      } catch (error) {
        rmSync(building, { recursive: true, force: true });
        if (!existsSync(done)) throw error;
      }
      return done;
    })();
    // A making that failed is tried again by the next test that asks.
    made.catch(() => making.delete(name));
    making.set(name, made);
  }
  return made;
}
