/** Runs sipp (the sip-tester package) against the gateway, bounded by call count and a timeout. */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { freePort } from "./ports";

export const SCENARIOS = resolve(import.meta.dir, "../sip-gateway/scenarios");

export interface SippRun {
  /** The Call-ID prefix; the first call's Call-ID is `${cid}-1`. */
  cid: string;
  callId: string;
  code: number;
  output: string;
  /** sipp's error log, when it wrote one. */
  errors: string;
  /** The -trace_msg log (when asked for): every message sent and received. */
  messages: string;
  /** The -trace_rtt CSV (when asked for): one INVITE-to-200 time per call, for the benchmark. */
  rtt: string;
}

export interface SippOptions {
  scenario: string;
  port: number;
  transport?: "udp" | "tcp" | "tls";
  service?: string;
  keys?: Record<string, string>;
  calls?: number;
  rate?: number;
  /** Call duration for the scenario's <pause/>, in ms. */
  holdMs?: number;
  timeoutSeconds?: number;
  localIp?: string;
  /** UAS scenarios listen instead of calling. */
  listenPort?: number;
  extra?: string[];
}

/**
 * freePort checks TCP only, and the gateway's RTP sockets take UDP ports the system picks: a
 * sipp that cannot bind its media port fails before any call, and is started again on others.
 */
export async function runSipp(options: SippOptions): Promise<SippRun> {
  for (let attempt = 1; ; attempt++) {
    const run = await runSippOnce(options);
    if (
      attempt === 3 ||
      run.code === 0 ||
      !/Unable to bind|Address already in use/.test(`${run.errors}\n${run.output}`)
    )
      return run;
  }
}

async function runSippOnce(options: SippOptions): Promise<SippRun> {
  const cid = options.keys?.cid ?? crypto.randomUUID();
  const dir = mkdtempSync(join(tmpdir(), "parley-sipp-"));
  const args = [
    "sipp",
    `127.0.0.1:${options.port}`,
    "-sf",
    resolve(SCENARIOS, options.scenario),
    "-i",
    options.localIp ?? "127.0.0.1",
    "-p",
    String(options.listenPort ?? (await freePort())),
    "-mp",
    String(await freePort()),
    "-t",
    options.transport === "tcp" ? "t1" : options.transport === "tls" ? "l1" : "u1",
    "-m",
    String(options.calls ?? 1),
    "-r",
    String(options.rate ?? 10),
    "-d",
    String(options.holdMs ?? 200),
    "-timeout",
    `${options.timeoutSeconds ?? 15}s`,
    "-timeout_error",
    "-nostdin",
    "-trace_err",
    "-max_recv_loops",
    "100",
    "-cid_str",
    `${cid}-%u`,
    ...(options.service ? ["-s", options.service] : []),
    ...Object.entries({ extra_header: "Subject: parley test", ...options.keys }).flatMap(([key, value]) => [
      "-key",
      key,
      value,
    ]),
    ...(options.extra ?? []),
  ];
  const child = Bun.spawn(args, { cwd: dir, stdout: "pipe", stderr: "pipe", stdin: "ignore" });
  const [stdout, stderr, code] = await Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
    child.exited,
  ]);
  const read = (suffix: string) =>
    readdirSync(dir)
      .filter((name) => name.endsWith(suffix))
      .map((name) => readFileSync(join(dir, name), "utf8"))
      .join("\n");
  const run = {
    cid,
    callId: `${cid}-1`,
    code,
    output: `${stdout}\n${stderr}`,
    errors: read("_errors.log"),
    rtt: read("_rtt.csv"),
    messages: read("_messages.log"),
  };
  rmSync(dir, { recursive: true, force: true });
  return run;
}
