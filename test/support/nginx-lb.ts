/**
 * nginx as the load balancer in front of Parley nodes, run with the configuration block that
 * docs/scaling.md shows (read from the page, so the page shows what is tested): its upstream
 * servers replaced by the nodes' loopback ports, its `listen 80` by a free loopback port,
 * inside a minimal main configuration of its own (temp dir, `daemon off`, one process).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Subprocess } from "bun";
import { freePort } from "./ports";
import { until } from "./wait";

const PAGE = resolve(import.meta.dir, "../../docs/scaling.md");

/** The page's nginx block. */
function documentedNginxBlock(): string {
  const block = /```nginx\n([\s\S]*?)```/.exec(readFileSync(PAGE, "utf8"))?.[1];
  if (!block) throw new Error("docs/scaling.md shows no nginx block");
  return block;
}

export interface NginxLb {
  base: string;
  ws: string;
  stop(): Promise<void>;
}

export async function startNginxLb(nodePorts: number[]): Promise<NginxLb> {
  const dir = mkdtempSync(join(tmpdir(), "parley-lb-"));
  const port = await freePort();
  const block = documentedNginxBlock();
  const servers = [...block.matchAll(/^(\s*)server \S+:3000( .*;)$/gm)];
  if (servers.length === 0) throw new Error("the nginx block lists no upstream server");
  const first = servers[0]!;
  const ours = nodePorts.map((nodePort) => `${first[1]}server 127.0.0.1:${nodePort}${first[2]}`).join("\n");
  const config = block
    .replace(/^\s*server \S+:3000 .*;\n/gm, "")
    .replace(/^(\s*upstream parley \{\n(?:\s*#.*\n)*)/m, `$1${ours}\n`)
    .replace(/listen 80;/, `listen 127.0.0.1:${port};`);
  if (!config.includes(`127.0.0.1:${nodePorts[0]}`) || !config.includes(`listen 127.0.0.1:${port}`))
    throw new Error(`could not fit the nginx block to the test:\n${config}`);
  writeFileSync(
    join(dir, "nginx.conf"),
    `daemon off;
master_process off;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
${config}
}
`,
  );
  const child: Subprocess = Bun.spawn(["nginx", "-p", dir, "-c", join(dir, "nginx.conf")], {
    stdout: "ignore",
    stderr: "pipe",
  });
  const base = `http://127.0.0.1:${port}`;
  const up = await until(
    () =>
      fetch(`${base}/healthz`, { signal: AbortSignal.timeout(1_000) }).then(
        (response) => response.ok,
        () => false,
      ),
    Boolean,
    10_000,
    100,
  );
  if (!up) {
    child.kill("SIGKILL");
    const said = child.stderr instanceof ReadableStream ? await new Response(child.stderr).text() : "";
    let logged = "";
    try {
      logged = readFileSync(join(dir, "error.log"), "utf8");
    } catch {}
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`nginx did not answer within 10 s: ${said}${logged}`);
  }
  return {
    base,
    ws: `ws://127.0.0.1:${port}`,
    async stop() {
      child.kill("SIGKILL");
      await child.exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
