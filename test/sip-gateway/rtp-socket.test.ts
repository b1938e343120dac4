/**
 * An RTP socket whose peer has gone: what it sends comes back as ICMP "port unreachable",
 * which the next receive reports as ECONNREFUSED. The call's socket must shrug that off (RTP
 * is lossy), not raise it: an unhandled socket error ends a gateway process, and every call
 * on it with it.
 */
import { expect, test } from "bun:test";
import { bindRtpSocket } from "../../sip-gateway/media";
import { eventually } from "../support/wait";

const settings = { bindAddress: "127.0.0.1", rtpPortMin: 0, rtpPortMax: 0 };

test("a peer's closed port is shrugged off: the socket keeps sending and receiving", async () => {
  const received: string[] = [];
  const socket = await bindRtpSocket(settings, (packet) => received.push(packet.toString()));
  const gone = await Bun.udpSocket({ hostname: "127.0.0.1", port: 0 });
  const gonePort = gone.port;
  gone.close();
  const peer = await Bun.udpSocket({ hostname: "127.0.0.1", port: 0 });
  try {
    for (let i = 0; i < 5; i++) {
      socket.send(Buffer.from("to nobody"), gonePort, "127.0.0.1");
      await Bun.sleep(20);
    }
    peer.send(Buffer.from("still here"), socket.port, "127.0.0.1");
    expect(await eventually(() => received.includes("still here"), 5_000)).toBe(true);
  } finally {
    peer.close();
    socket.close();
  }
});
