/**
 * postgres.js 3.4.9 defers small writes with setImmediate; when the connection closes first
 * (PostgreSQL restarted or killed), the deferred write runs on a null socket and throws a
 * TypeError from the timer, which no caller can catch: the process dies
 * (porsager/postgres#1066, #1154, #1208; a fix is proposed upstream in #1176).
 * The query concerned was already rejected with CONNECTION_CLOSED, so the write is moot:
 * it is dropped, and the buffer and timer are cleared so the reconnected socket starts clean.
 * The fix is applied to the driver's source as Bun loads it; once a release carries it,
 * the pattern no longer matches and this does nothing.
 */
import { plugin } from "bun";

const UNGUARDED = "function nextWrite(fn) {\n    const x = socket.write(chunk, fn)";
const GUARDED = "function nextWrite(fn) {\n    if (!socket) { chunk = null; nextWriteTimer = null; return false }\n    const x = socket.write(chunk, fn)";

plugin({
  name: "parley:postgres-write-guard",
  setup(build) {
    build.onLoad({ filter: /[\\/]postgres[\\/]src[\\/]connection\.js$/ }, async ({ path }) => ({
      contents: (await Bun.file(path).text()).replace(UNGUARDED, GUARDED),
      loader: "js",
    }));
  },
});
