/**
 * The bridge's RTP relay: packets per second through the gateway's relay (caller side →
 * endpoint side → an echo → back through both), beside a bare UDP echo loop between the
 * same kind of Bun sockets in the same run, so the ratio says what relaying costs. Each
 * flow keeps a window of packets in flight and sends one more for every one that returns;
 * the relay is measured with 1 call and with many calls at once.
 *
 *   bun test/bench/sip-media.bench.ts      (no database needed)
 */
import type { udp } from "bun";

process.env.LOG_LEVEL ??= "error";

const { config } = await import("../../src/core/config");
const { GatewayMedia } = await import("../../sip-gateway/media");
const { EndpointMedia } = await import("../../sip-gateway/bridge");

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const WINDOW = 64;
const settings = {
  ...config.sip,
  bindAddress: "127.0.0.1",
  rtpPortMin: 0,
  rtpPortMax: 0,
  advertisedAddress: "127.0.0.1",
};

function rtpPacket(sequence: number): Buffer {
  const packet = Buffer.alloc(172);
  packet[0] = 0x80;
  packet[1] = 8;
  packet.writeUInt16BE(sequence & 0xffff, 2);
  packet.writeUInt32BE(sequence * 160, 4);
  packet.writeUInt32BE(0x1234abcd, 8);
  return packet;
}

const sdp = (port: number) =>
  "v=0\r\no=x 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n" +
  `m=audio ${port} RTP/AVP 8 101\r\na=rtpmap:8 PCMA/8000\r\na=rtpmap:101 telephone-event/8000\r\n`;

async function echo(): Promise<udp.Socket<"buffer">> {
  return Bun.udpSocket({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      data(socket, packet, port, address) {
        socket.send(packet, port, address);
      },
    },
  });
}

/** `flows` phones, each sending to `targetOf(i)` with a window in flight; returns packets back per second. */
async function drive(flows: number, targetOf: (index: number, phonePort: number) => Promise<number>): Promise<number> {
  let returned = 0;
  let running = true;
  const phones: udp.Socket<"buffer">[] = [];
  const targets: number[] = [];
  for (let i = 0; i < flows; i++) {
    const index = i;
    let sequence = 0;
    const phone = await Bun.udpSocket({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        data(socket) {
          returned++;
          if (running) socket.send(rtpPacket(sequence++), targets[index]!, "127.0.0.1");
        },
      },
    });
    phones.push(phone);
    targets.push(await targetOf(i, phone.port));
  }
  const window = Math.max(1, Math.floor(WINDOW / flows));
  for (const [index, phone] of phones.entries())
    for (let k = 0; k < window; k++) phone.send(rtpPacket(k), targets[index]!, "127.0.0.1");
  await Bun.sleep(300);
  const start = returned;
  const started = performance.now();
  await Bun.sleep(SECONDS * 1000);
  const rate = ((returned - start) * 1000) / (performance.now() - started);
  running = false;
  for (const phone of phones) phone.close();
  return rate;
}

async function bare(flows: number): Promise<number> {
  const echoes: udp.Socket<"buffer">[] = [];
  const rate = await drive(flows, async () => {
    const socket = await echo();
    echoes.push(socket);
    return socket.port;
  });
  for (const socket of echoes) socket.close();
  return rate;
}

async function relayed(flows: number): Promise<number> {
  const closers: (() => void)[] = [];
  const rate = await drive(flows, async (_index, phonePort) => {
    const endpoint = await echo();
    const caller = new GatewayMedia(settings);
    await caller.setDescription(sdp(phonePort));
    const socket = await caller.open();
    const leg = new EndpointMedia(settings, caller, { payloadType: 8, name: "PCMA" }, 101);
    await leg.open();
    leg.acceptAnswer(sdp(endpoint.port));
    closers.push(() => {
      leg.close();
      caller.close();
      endpoint.close();
    });
    return socket.port;
  });
  for (const close of closers) close();
  return rate;
}

const rows: string[][] = [];
for (const flows of [1, 100]) {
  const loop = await bare(flows);
  const relay = await relayed(flows);
  rows.push([
    String(flows),
    Math.round(loop).toString(),
    Math.round(relay).toString(),
    Math.round(2 * relay).toString(),
    (loop / relay).toFixed(2),
  ]);
}
console.log("flows | bare echo round trips/s | relayed round trips/s | packets relayed/s | bare/relayed");
for (const row of rows) console.log(row.join(" | "));
console.log("(a relayed round trip is 2 packets through the relay, one each way; a G.711 call is 100 packets/s)");
process.exit(0);
