/**
 * The physical limit for the fan-out benchmark: a bare Bun WebSocket server that speaks
 * just enough of the Phoenix protocol for the same `phoenix` clients (join and heartbeat
 * replies) and relays every other push with one `publish` to the rest of the topic, as a
 * broadcast frame with null refs, answering the push as Parley does. No authentication,
 * rate limits, validation or presence. Usage: bun bare-server.ts <port> [host: 127.0.0.1] [database URL]
 *
 * Given a database, it stores each push as one row, committed, before it relays and answers it, as
 * `chat:` stores a message before its broadcast: the floor of a server whose messages are durable.
 */
import postgres from "postgres";

type Frame = [string | null, string | null, string, string, unknown];

const databaseUrl = process.argv[4];
const database = databaseUrl ? postgres(databaseUrl, { max: 4, onnotice: () => {} }) : undefined;
await database?.unsafe(
  "create table if not exists bench_fanout_stored (id bigserial primary key, topic text, payload jsonb)",
);

const server = Bun.serve({
  hostname: process.argv[3] ?? "127.0.0.1",
  port: Number(process.argv[2]),
  fetch(request, srv) {
    return srv.upgrade(request) ? undefined : new Response("upgrade only", { status: 400 });
  },
  websocket: {
    async message(ws, message) {
      const [joinRef, ref, topic, event, payload] = JSON.parse(String(message)) as Frame;
      const reply = () => ws.send(JSON.stringify([joinRef, ref, topic, "phx_reply", { status: "ok", response: {} }]));
      if (event === "phx_join") ws.subscribe(topic);
      else if (topic !== "phoenix") {
        if (database)
          await database`insert into bench_fanout_stored (topic, payload) values (${topic}, ${database.json(payload as never)})`;
        ws.publish(topic, JSON.stringify([null, null, topic, event, payload]));
      }
      reply();
    },
  },
});
console.log(`listening ${server.port}`);
