/**
 * postgres.js 3.4.9 defers small writes with setImmediate; when the connection closes first
 * (PostgreSQL restarted or killed), the deferred write runs on a null socket and throws a
 * TypeError from the timer, which no caller can catch: the process dies
 * (porsager/postgres#1066, #1154, #1208; a fix is proposed upstream in #1176).
 * The query concerned was already rejected with CONNECTION_CLOSED, so the write is moot:
 * it is dropped, and the buffer and timer are cleared so the reconnected socket starts clean.
 * The fix is applied to the driver's source as Bun loads it; once a release carries it,
 * the pattern no longer matches and this does nothing. The same goes for the fixes below.
 */
import { plugin } from "bun";

const UNGUARDED = "function nextWrite(fn) {\n    const x = socket.write(chunk, fn)";
const GUARDED =
  "function nextWrite(fn) {\n    if (!socket) { chunk = null; nextWriteTimer " +
  "= null; return false }\n    const x = socket.write(chunk, fn)";

/*
 * With several hosts in DATABASE_URL, postgres.js 3.4.9 means to try each host in turn and
 * report the failure once all have failed, counting them in `retries`, which it never
 * increments: a failure to connect is then never reported, and a query waits until some
 * host accepts it (for ever, while no primary is up) instead of failing, so a request would
 * hang where it should be answered 503. Counting each host tried, and reporting the failure
 * once every host was tried in this round, restores the intent. With one host nothing changes.
 */
const UNCOUNTED_TRY = "    hostIndex = (hostIndex + 1) % port.length\n  }";
const COUNTED_TRY = "    hostIndex = (hostIndex + 1) % port.length\n    retries++\n  }";
const UNCOUNTED_FAILURE =
  "    if (connection.queue === queues.connecting && options.host[retries + 1])\n      return\n";
const COUNTED_FAILURE =
  "    if (connection.queue === queues.connecting && options.host[retries])\n      return\n    retries = 0\n";

/*
 * And its `read-write` takes a hot standby for writable: a standby reports
 * default_transaction_read_only off (only its transactions are read-only), which is all the
 * driver checks, so connections would settle on the standby and every write fail there. As
 * libpq does, a server in hot standby is not read-write either.
 */
const STANDBY_WRITABLE = "(x === 'read-write' && xs.default_transaction_read_only === 'on') ||";
const STANDBY_NOT_WRITABLE =
  "(x === 'read-write' && (xs.default_transaction_read_only === 'on' || xs.in_hot_standby === 'on')) ||";

plugin({
  name: "parley:postgres-write-guard",
  setup(build) {
    build.onLoad({ filter: /[\\/]postgres[\\/]src[\\/]connection\.js$/ }, async ({ path }) => ({
      contents: (await Bun.file(path).text())
        .replace(UNGUARDED, GUARDED)
        .replace(UNCOUNTED_TRY, COUNTED_TRY)
        .replace(UNCOUNTED_FAILURE, COUNTED_FAILURE)
        .replace(STANDBY_WRITABLE, STANDBY_NOT_WRITABLE),
      loader: "js",
    }));
  },
});
