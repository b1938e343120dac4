/**
 * Socket.IO 4 reference for the fan-out benchmark, run on Node as Socket.IO's own
 * benchmarks are: everyone joins one room, and a "tick" is relayed to the room but the
 * sender (Parley's rtc relay does the same). Usage: node socketio-server.mjs <port>
 */
import { createServer } from "node:http";
import { Server } from "socket.io";

const http = createServer();
const io = new Server(http, { transports: ["websocket"] });
io.on("connection", (socket) => {
  socket.join("room");
  socket.on("tick", (payload) => socket.to("room").emit("tick", payload));
});
http.listen(Number(process.argv[2]), "127.0.0.1", () => console.log("listening"));
