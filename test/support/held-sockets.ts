/**
 * A client process that opens sockets with the `phoenix` client and keeps them, for tests
 * that kill it (SIGKILL) to see what an abrupt disconnect frees on the server:
 *
 *   bun test/support/held-sockets.ts <ws base url> <token> <sockets> [topics per socket]
 *
 * Prints "ready" once every socket is open and has joined its topics.
 */
import { connect, join } from "./phoenix";

const [base, token, count, topics = "0"] = process.argv.slice(2);
const sockets = Array.from({ length: Number(count) }, () => connect(base!, token!));
await Promise.all(
  sockets.map((socket, i) =>
    Promise.all(Array.from({ length: Number(topics) }, (_, t) => join(socket.channel(`rtc:held-${i}-${t}`)))),
  ),
);
console.log("ready");
setInterval(() => {}, 60_000);
