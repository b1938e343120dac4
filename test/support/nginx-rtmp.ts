/**
 * A private nginx with libnginx-mod-rtmp as the media server for tests: its own nginx.conf
 * in a temp dir (free loopback ports, `daemon off`, every pid/log/temp path inside the dir),
 * run as a child process. The system nginx is never touched.
 *
 * - rtmp application `live`: HLS (1 s fragments) with the five multi_bitrate `hls_variant`
 *   lines, and on_publish / on_play / on_done callbacks to Parley with the shared secret.
 * - rtmp application `direct`: plain live, no callbacks.
 * - http server: /hls/ serves the playlists and segments (Parley serves LL-HLS itself).
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BITRATE_LADDER } from "../../src/modules/streaming/ladder";
import { freePort } from "./ports";

export interface NginxRtmp {
  rtmpPort: number;
  httpPort: number;
  dir: string;
  /** The STREAMING_* settings that point Parley at this media server. */
  settings: {
    rtmpIngestUrl: string;
    hlsBaseUrl: string;
    rtmpBaseUrl: string;
    flvBaseUrl: string;
  };
  /** RTMP application without callbacks. */
  directUrl: string;
  stop(): Promise<void>;
}

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: "127.0.0.1" }, () => socket.end(() => resolve(true)));
    socket.on("error", () => resolve(false));
  });
}

export async function startNginxRtmp(callbackBase: string, secret: string): Promise<NginxRtmp> {
  const dir = mkdtempSync(join(tmpdir(), "parley-nginx-"));
  for (const sub of ["hls", "logs", "temp"]) mkdirSync(join(dir, sub));
  const [rtmpPort, httpPort] = [await freePort(), await freePort()];
  const hook = (name: string) => `${callbackBase}/terraform/v1/hooks/srs/${name}?secret=${secret}`;
  const variants = BITRATE_LADDER.map(
    (v) => `      hls_variant ${v.suffix} BANDWIDTH=${v.totalKbps * 1000},RESOLUTION=${v.width}x${v.height};`,
  ).join("\n");
  const conf = `
load_module /usr/lib/nginx/modules/ngx_rtmp_module.so;
daemon off;
master_process off;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/logs/error.log warn;
events { worker_connections 256; }
rtmp {
  server {
    listen 127.0.0.1:${rtmpPort};
    chunk_size 4096;
    application live {
      live on;
      hls on;
      hls_path ${dir}/hls;
      hls_fragment 1s;
      hls_playlist_length 10s;
${variants}
      on_publish ${hook("on_publish")};
      on_play ${hook("on_play")};
      on_done ${hook("on_done")};
    }
    # No callbacks: for publishing straight from a driver, as the benchmark's reference does.
    application direct {
      live on;
    }
  }
}
http {
  access_log off;
  types { application/vnd.apple.mpegurl m3u8; video/mp2t ts; }
  client_body_temp_path ${dir}/temp/body;
  proxy_temp_path ${dir}/temp/proxy;
  fastcgi_temp_path ${dir}/temp/fastcgi;
  uwsgi_temp_path ${dir}/temp/uwsgi;
  scgi_temp_path ${dir}/temp/scgi;
  server {
    listen 127.0.0.1:${httpPort};
    location /hls/ { alias ${dir}/hls/; add_header Cache-Control no-cache; }
  }
}
`;
  writeFileSync(join(dir, "nginx.conf"), conf);
  const child = Bun.spawn(["nginx", "-e", join(dir, "logs/error.log"), "-p", dir, "-c", join(dir, "nginx.conf")], {
    stdout: "ignore",
    stderr: "inherit",
  });
  for (let i = 0; i < 100 && !((await listening(httpPort)) && (await listening(rtmpPort))); i++) await Bun.sleep(50);
  return {
    rtmpPort,
    httpPort,
    dir,
    directUrl: `rtmp://127.0.0.1:${rtmpPort}/direct`,
    settings: {
      rtmpIngestUrl: `rtmp://127.0.0.1:${rtmpPort}/live`,
      hlsBaseUrl: `http://127.0.0.1:${httpPort}/hls`,
      rtmpBaseUrl: `rtmp://127.0.0.1:${rtmpPort}/live`,
      flvBaseUrl: `http://127.0.0.1:${httpPort}/live`,
    },
    async stop() {
      child.kill("SIGQUIT");
      const exited = await Promise.race([child.exited.then(() => true), Bun.sleep(3_000).then(() => false)]);
      if (!exited) child.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
