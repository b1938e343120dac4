/**
 * Why a recorder failed, in terms an operator can act on. A recorder that exits most often
 * found no media server at the ingest: ffmpeg then says only "<url>: Connection refused".
 * Parley tries the ingest address itself and, when nothing answers, names the setting that
 * points there and the address it tried.
 */
import { connect } from "node:net";

export interface Ingest {
  /** The variable that sets it, e.g. STREAMING_RTMP_INGEST_URL. */
  setting: string;
  /** Its value: the media server's RTMP application. */
  url: string;
}

const PROBE_TIMEOUT_MS = 2_000;
const DEFAULT_PORTS: Record<string, number> = { "rtmp:": 1935, "rtmps:": 443 };

/** The URL without credentials, as it may be shown. */
function shown(url: URL): string {
  return `${url.protocol}//${url.host}${url.pathname}`;
}

function answers(host: string, port: number): Promise<string | undefined> {
  return new Promise((done) => {
    const socket = connect({ host, port, timeout: PROBE_TIMEOUT_MS }, () => {
      socket.destroy();
      done(undefined);
    });
    socket.on("error", (error: NodeJS.ErrnoException) => done(error.code ?? error.message));
    socket.on("timeout", () => {
      socket.destroy();
      done("no answer within 2 s");
    });
  });
}

/** `media_server_unreachable: …` naming the first ingest nothing answers at, or undefined when every one answers. */
export async function unreachableIngest(ingests: Ingest[]): Promise<string | undefined> {
  for (const ingest of ingests) {
    const url = new URL(ingest.url);
    const host = url.hostname.replace(/^\[|\]$/g, "");
    const port = Number(url.port) || DEFAULT_PORTS[url.protocol] || 1935;
    const failure = await answers(host, port);
    if (failure) {
      return (
        `media_server_unreachable: no media server answers at ${host}:${port} (${failure}); ` +
        `start it, or set ${ingest.setting} (now ${shown(url)}) to its RTMP application`
      );
    }
  }
  return undefined;
}
