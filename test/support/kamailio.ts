/**
 * Kamailio as an operator's trunk proxy and registrar, on a free loopback port: REGISTER is
 * digest-authenticated against one plain-text user, INVITEs are record-routed and relayed to
 * whoever registered the dialled number, in-dialog requests follow the route set.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "./ports";

export interface Kamailio {
  port: number;
  output(): string;
  stop(): Promise<void>;
}

export async function startKamailio(user: { username: string; password: string }): Promise<Kamailio> {
  const dir = mkdtempSync(join(tmpdir(), "parley-kamailio-"));
  const port = await freePort();
  const config = `#!KAMAILIO
debug=2
log_stderror=yes
children=2
auto_aliases=no
listen=udp:127.0.0.1:${port}
alias="127.0.0.1:${port}"

loadmodule "tm.so"
loadmodule "sl.so"
loadmodule "rr.so"
loadmodule "pv.so"
loadmodule "maxfwd.so"
loadmodule "siputils.so"
loadmodule "textops.so"
loadmodule "xlog.so"
loadmodule "usrloc.so"
loadmodule "registrar.so"
loadmodule "auth.so"

modparam("usrloc", "db_mode", 0)

request_route {
  if (!mf_process_maxfwd_header("10")) { sl_send_reply("483", "Too Many Hops"); exit; }
  if (has_totag()) {
    if (loose_route()) {
      xlog("L_NOTICE", "in-dialog $rm from $si:$sp\n");
      t_relay();
      exit;
    }
    if (is_method("ACK")) { if (t_check_trans()) { t_relay(); } exit; }
    sl_send_reply("404", "Not here");
    exit;
  }
  if (is_method("CANCEL")) { if (t_check_trans()) { t_relay(); } exit; }
  t_check_trans();
  if (is_method("REGISTER")) {
    $var(password) = "${user.password}";
    if ($au != "${user.username}" || !pv_auth_check("$fd", "$var(password)", "0", "1")) {
      auth_challenge("$fd", "0");
      exit;
    }
    xlog("L_NOTICE", "registered $tu\\n");
    save("location");
    exit;
  }
  if (is_method("INVITE")) { record_route(); }
  if (!lookup("location")) { sl_send_reply("404", "Not Found"); exit; }
  xlog("L_NOTICE", "relaying $rm to $ru\\n");
  t_relay();
}
`;
  const file = join(dir, "kamailio.cfg");
  writeFileSync(file, config);
  const child = Bun.spawn(
    [
      "kamailio",
      "-f",
      file,
      "-DD",
      "-E",
      "-m",
      "32",
      "-M",
      "4",
      "-Y",
      dir,
      "-P",
      join(dir, "kamailio.pid"),
      "-a",
      "no",
    ],
    { stdout: "pipe", stderr: "pipe", stdin: "ignore" },
  );
  let printed = "";
  const collect = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    for await (const chunk of stream) printed += decoder.decode(chunk);
  };
  const reading = Promise.all([collect(child.stdout), collect(child.stderr)]);
  const stop = async () => {
    if (child.exitCode === null) {
      child.kill("SIGTERM");
      const exited = await Promise.race([child.exited.then(() => true), Bun.sleep(3_000).then(() => false)]);
      if (!exited) child.kill("SIGKILL");
    }
    await Promise.race([reading, Bun.sleep(1_000)]);
    rmSync(dir, { recursive: true, force: true });
  };
  // Ready once its SIP socket answers: an OPTIONS gets some reply.
  for (let i = 0; ; i++) {
    if (child.exitCode !== null || i === 50) {
      await stop();
      throw new Error(`kamailio did not start:\n${printed.slice(-3000)}`);
    }
    if (/INFO:.*(main|init).*|Listening on/.test(printed) && (await answersSip(port))) break;
    await Bun.sleep(100);
  }
  return { port, output: () => printed, stop };
}

async function answersSip(port: number): Promise<boolean> {
  let answered = false;
  const socket = await Bun.udpSocket({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      data: () => {
        answered = true;
      },
      // A probe sent before Kamailio listens comes back as ICMP port unreachable: it is asked again.
      error: () => {},
    },
  });
  const request = [
    `OPTIONS sip:127.0.0.1:${port} SIP/2.0`,
    `Via: SIP/2.0/UDP 127.0.0.1:${socket.port};branch=z9hG4bK${crypto.randomUUID()};rport`,
    "From: <sip:probe@127.0.0.1>;tag=probe",
    `To: <sip:127.0.0.1:${port}>`,
    `Call-ID: ${crypto.randomUUID()}`,
    "CSeq: 1 OPTIONS",
    "Max-Forwards: 70",
    "Content-Length: 0",
    "",
    "",
  ].join("\r\n");
  socket.send(request, port, "127.0.0.1");
  for (let i = 0; i < 5 && !answered; i++) await Bun.sleep(50);
  socket.close();
  return answered;
}
