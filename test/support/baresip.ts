/**
 * baresip (a real softphone) run headless: its audio comes from a wav file (aufile), what it
 * receives is written to wav files (sndfile), and it is driven through its UDP console (cons):
 * long commands such as `/dial` and single keys (digits are sent as RFC 4733 DTMF in a call).
 */
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "./ports";

export interface Baresip {
  sipPort: number;
  /** Everything baresip printed so far. */
  output(): string;
  dial(uri: string): Promise<void>;
  key(keys: string, gapMs?: number): Promise<void>;
  hangUp(): Promise<void>;
  /** Waits (bounded) until baresip printed a line matching `pattern`. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<void>;
  /** The received audio (decoded), as baresip recorded it. */
  recording(): string | undefined;
  stop(): Promise<void>;
}

type Options = { lifetimeSeconds?: number; toneSeconds?: number };

/** baresip also listens on TCP and TLS beside the chosen port (TLS one above it): on a clash, take other ports. */
export async function startBaresip(options: Options = {}): Promise<Baresip> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(options);
    } catch (error) {
      if (attempt === 3 || !/Address already in use/.test((error as Error).message)) throw error;
    }
  }
}

async function startOnce(options: Options): Promise<Baresip> {
  const dir = mkdtempSync(join(tmpdir(), "parley-baresip-"));
  const recordings = join(dir, "recordings");
  mkdirSync(recordings);
  const tone = join(dir, "tone.wav");
  // A steady tone to send: what comes back must be as loud, not silence.
  const sox = Bun.spawnSync([
    "sox",
    "-n",
    "-r",
    "8000",
    "-c",
    "1",
    "-b",
    "16",
    tone,
    "synth",
    String(options.toneSeconds ?? 20),
    "sine",
    "440",
    "vol",
    "0.5",
  ]);
  if (sox.exitCode !== 0) throw new Error(`sox failed: ${sox.stderr.toString()}`);
  const sipPort = await freePort();
  const consolePort = await freePort();
  const rtpBase = 20_000 + Math.floor(Math.random() * 20_000) * 2;
  writeFileSync(
    join(dir, "config"),
    [
      "poll_method epoll",
      `sip_listen 127.0.0.1:${sipPort}`,
      "module_path /usr/lib/baresip/modules",
      "module g711.so",
      "module aufile.so",
      "module aubridge.so",
      "module sndfile.so",
      "module cons.so",
      "module_app account.so",
      "module_app menu.so",
      `cons_listen 127.0.0.1:${consolePort}`,
      // No sound card: the player is a bridge to nowhere, and sndfile records what is decoded.
      "audio_player aubridge,nowhere",
      "audio_alert aubridge,nowhere",
      `audio_source aufile,${tone}`,
      `snd_path ${recordings}`,
      `rtp_ports ${rtpBase}-${rtpBase + 20}`,
      "",
    ].join("\n"),
  );
  writeFileSync(join(dir, "accounts"), "<sip:caller@127.0.0.1>;regint=0\n");
  writeFileSync(join(dir, "contacts"), "");
  const child = Bun.spawn(["baresip", "-f", dir, "-t", String(options.lifetimeSeconds ?? 30)], {
    stdout: "pipe",
    stderr: "pipe",
    stdin: "ignore",
  });
  let printed = "";
  const collect = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    for await (const chunk of stream) printed += decoder.decode(chunk);
  };
  const reading = Promise.all([collect(child.stdout), collect(child.stderr)]);
  // A command sent before baresip's console listens (or after it quit) comes back as ICMP port unreachable.
  const socket = await Bun.udpSocket({ hostname: "127.0.0.1", port: 0, socket: { error: () => {} } });
  const send = (text: string) => socket.send(text, consolePort, "127.0.0.1");
  const waitFor = async (pattern: RegExp, timeoutMs = 5_000) => {
    const deadline = Date.now() + timeoutMs;
    while (!pattern.test(printed)) {
      if (Date.now() > deadline) throw new Error(`baresip never printed ${pattern}:\n${printed.slice(-3000)}`);
      if (child.exitCode !== null) throw new Error(`baresip exited ${child.exitCode}:\n${printed.slice(-3000)}`);
      await Bun.sleep(50);
    }
  };
  try {
    await waitFor(/baresip is ready/);
    // baresip gets ready without a module that could not bind: its console's port is a UDP
    // one, chosen free for TCP, and an RTP socket of this machine may hold it.
    if (/Address already in use/.test(printed)) throw new Error(`baresip could not bind a port:\n${printed}`);
  } catch (error) {
    child.kill("SIGKILL");
    socket.close();
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    sipPort,
    output: () => printed,
    waitFor,
    async dial(uri) {
      send(`/dial ${uri}\n`);
    },
    async key(keys, gapMs = 250) {
      for (const key of keys) {
        send(key);
        await Bun.sleep(gapMs);
      }
    },
    async hangUp() {
      send("b");
    },
    recording() {
      const name = readdirSync(recordings).find((file) => file.endsWith("-dec.wav"));
      return name ? join(recordings, name) : undefined;
    },
    async stop() {
      if (child.exitCode === null) {
        send("q");
        const exited = await Promise.race([child.exited.then(() => true), Bun.sleep(2_000).then(() => false)]);
        if (!exited) child.kill("SIGKILL");
      }
      socket.close();
      await Promise.race([reading, Bun.sleep(1_000)]);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** sox's RMS amplitude of a wav file (0 = silence, about 0.35 for the tone sent). */
export function rmsAmplitude(path: string): number {
  const stat = Bun.spawnSync(["sox", path, "-n", "stat"], { stderr: "pipe" });
  const match = /RMS\s+amplitude:\s+([\d.]+)/.exec(stat.stderr.toString());
  if (!match) throw new Error(`sox stat gave no amplitude: ${stat.stderr.toString()}`);
  return Number(match[1]);
}
