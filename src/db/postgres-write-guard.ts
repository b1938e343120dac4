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

/*
 * A connection keeps its session's state when its socket closes: the query in flight (already
 * rejected) and the error the dying backend sent ("terminating connection", 57P01) stay set, and
 * the next session's first ReadyForQuery takes them for its own. The old error then rejects that
 * session's first query, and, as it rejects the query the connection was opened for, the
 * session skips its read-write check: during a failover connections settled on the standby and
 * writes failed there (25006), or a later query was answered with another's result and waited for
 * ever. A write still buffered stays too, with the id of its cancelled timer: the next session's
 * startup message is queued behind it and never sent, so that connection waits out its connect
 * timeout. And a query sent between the socket's error and its close is rejected by neither, and
 * waits for ever. Once the socket is gone that state belongs to no one: it is cleared, and every
 * query still waiting on it is rejected. (While a connection is still opening, the only query in
 * flight is the driver's own startup query.)
 */
const STALE_ON_CLOSE =
  "    socket = null\n\n    if (initial)\n      return reconnect()\n\n" +
  "    !hadError && (query || sent.length) && error(Errors.connection('CONNECTION_CLOSED', options, socket))\n";
const CLEARED_ON_CLOSE =
  "    socket = null\n    chunk = nextWriteTimer = errorResponse = null\n\n" +
  "    if (initial) {\n      query = null\n      return reconnect()\n    }\n\n" +
  "    !hadError && (query || sent.length) && error(Errors.connection('CONNECTION_CLOSED', options, socket))\n" +
  "    while (sent.length)\n      queryError(sent.shift(), Errors.connection('CONNECTION_CLOSED', options, socket))\n" +
  "    query = results = null\n    result = new Result()\n";

/*
 * A transaction's connection that closes rejects the transaction, but its callback runs on, and
 * what it queries next (an ORM's own ROLLBACK after the error, for one) went straight to the
 * connection: once the pool had reopened it for another caller the query ran in that caller's
 * session, outside any transaction (committed on its own, or ending the other's transaction), and
 * while it stayed closed the query waited for ever. Once its connection has closed, a
 * transaction refuses every query, those it had queued too, as CONNECTION_CLOSED.
 */
const TRANSACTION_UNBOUND = "    let savepoints = 0\n      , connection\n";
const TRANSACTION_BOUND = "    let savepoints = 0\n      , connection\n      , connectionLost = null\n";
const CLOSE_REJECTS_TRANSACTION = "new Promise((_, reject) => connection.onclose = reject)";
const CLOSE_REJECTS_ITS_WORK =
  "new Promise((_, reject) => connection.onclose = e => {\n" +
  "          connectionLost = e\n          while (queries.length) queries.shift().reject(e)\n" +
  "          reject(e)\n        })";
const TRANSACTION_QUERY = "        q.catch(e => uncaughtError || (uncaughtError = e))\n        c.queue === full\n";
const TRANSACTION_QUERY_REFUSED =
  "        q.catch(e => uncaughtError || (uncaughtError = e))\n        if (connectionLost)\n" +
  "          return q.reject(connectionLost)\n        c.queue === full\n";

plugin({
  name: "parley:postgres-write-guard",
  setup(build) {
    build.onLoad({ filter: /[\\/]postgres[\\/]src[\\/]connection\.js$/ }, async ({ path }) => ({
      contents: (await Bun.file(path).text())
        .replace(UNGUARDED, GUARDED)
        .replace(UNCOUNTED_TRY, COUNTED_TRY)
        .replace(UNCOUNTED_FAILURE, COUNTED_FAILURE)
        .replace(STANDBY_WRITABLE, STANDBY_NOT_WRITABLE)
        .replace(STALE_ON_CLOSE, CLEARED_ON_CLOSE),
      loader: "js",
    }));
    build.onLoad({ filter: /[\\/]postgres[\\/]src[\\/]index\.js$/ }, async ({ path }) => ({
      contents: (await Bun.file(path).text())
        .replace(TRANSACTION_UNBOUND, TRANSACTION_BOUND)
        .replace(CLOSE_REJECTS_TRANSACTION, CLOSE_REJECTS_ITS_WORK)
        .replace(TRANSACTION_QUERY, TRANSACTION_QUERY_REFUSED),
      loader: "js",
    }));
  },
});
