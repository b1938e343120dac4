/**
 * Where each named platform takes a live stream: its RTMP(S) ingest, to which the
 * stream key is appended as the last path segment. Names are matched case-insensitively.
 */
export const PLATFORM_INGESTS: Record<string, string> = {
  youtube: "rtmp://a.rtmp.youtube.com/live2",
  youtube_backup: "rtmp://b.rtmp.youtube.com/live2",
  facebook: "rtmps://live-api-s.facebook.com:443/rtmp",
  instagram: "rtmps://live-upload.instagram.com:443/rtmp",
  twitch: "rtmp://live.twitch.tv/app",
  kick: "rtmps://fa723fc1b171.global-contribute.live-video.net/app",
  vimeo: "rtmps://rtmp-global.cloud.vimeo.com:443/live",
  trovo: "rtmp://livepush.trovo.live/live",
  dlive: "rtmp://stream.dlive.tv/live",
  restream: "rtmp://live.restream.io/live",
  mux: "rtmps://global-live.mux.com:443/app",
};

export const PLATFORM_NAMES = Object.keys(PLATFORM_INGESTS);

/**
 * Characters a stream key or destination URL may hold. It leaves out whitespace and the
 * characters ffmpeg's tee muxer treats as syntax (`|`, `[`, `]`, `\`, `'`), so no escaping
 * is ever needed when the recorder command line is built.
 */
export const SAFE_URL_TEXT = /^[A-Za-z0-9._~!$&()*+,;=:@?%/#-]+$/;

export function platformIngest(platform: string): string | undefined {
  return PLATFORM_INGESTS[platform.toLowerCase()];
}

/** True when `host` matches one of the operator's patterns (`live.example.com` or `*.example.com`). */
export function hostAllowed(host: string, patterns: readonly string[]): boolean {
  const name = host.toLowerCase();
  return patterns.some((pattern) => {
    const wanted = pattern.toLowerCase();
    if (wanted === "*") return true;
    if (wanted.startsWith("*.")) return name.endsWith(wanted.slice(1));
    return name === wanted;
  });
}
