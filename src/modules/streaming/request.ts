/** A start request checked and made into the stream's options and its RTMP destinations. */
import { config } from "../../core/config";
import { AppError } from "../../core/errors";
import type { StreamingModel } from "./model";
import type { StreamOptions } from "./options";
import { hostAllowed, PLATFORM_NAMES, platformIngest, SAFE_URL_TEXT } from "./platforms";

export const DEFAULT_RECONNECT_WINDOW = 6000;
/** A day; a longer window would keep an empty room's recorder for no one. */
export const MAX_RECONNECT_WINDOW = 8_640_000;

export type StartRequest = typeof StreamingModel.start.static;

export function invalid(message: string): never {
  throw new AppError("validation_failed", message, { started: false });
}

export function parseReconnectWindow(value: string | number | undefined): number {
  if (value === undefined || value === "") return DEFAULT_RECONNECT_WINDOW;
  const units = typeof value === "number" ? value : /^\s*\d+\s*$/.test(value) ? Number(value) : Number.NaN;
  if (!Number.isInteger(units) || units < 0 || units > MAX_RECONNECT_WINDOW) {
    invalid(`reconnect_window must be a whole number from 0 to ${MAX_RECONNECT_WINDOW} (6000 = one minute)`);
  }
  return units;
}

/** Turns stream_keys and stream_urls into RTMP destination URLs, refusing unknown platforms and unlisted hosts. */
export function destinationsOf(request: Pick<StartRequest, "stream_keys" | "stream_urls">): string[] {
  const destinations: string[] = [];
  for (const { key: platform, value } of request.stream_keys ?? []) {
    const ingest = platformIngest(platform);
    if (!ingest)
      invalid(`unknown platform "${platform}" in stream_keys; known platforms: ${PLATFORM_NAMES.join(", ")}`);
    if (!SAFE_URL_TEXT.test(value))
      invalid(`the stream key for "${platform}" holds characters a stream key cannot have`);
    destinations.push(`${ingest}/${value}`);
  }
  for (const raw of request.stream_urls ?? []) {
    let parsed: URL;
    try {
      parsed = new URL(raw);
    } catch {
      invalid("every stream_urls entry must be an rtmp:// or rtmps:// URL");
    }
    if (parsed.protocol !== "rtmp:" && parsed.protocol !== "rtmps:")
      invalid("every stream_urls entry must be an rtmp:// or rtmps:// URL");
    if (!SAFE_URL_TEXT.test(raw)) invalid("a stream_urls entry holds characters an RTMP URL cannot have");
    if (!hostAllowed(parsed.hostname, config.streaming.destinationHosts)) {
      // Only the host is named: the rest of the URL usually carries a stream key.
      invalid(`stream_urls host "${parsed.hostname}" is not on this server's allow-list (STREAMING_DESTINATION_HOSTS)`);
    }
    destinations.push(raw);
  }
  return destinations;
}

export function optionsOf(request: StartRequest): StreamOptions {
  const codec = (request.codec ?? "H264").toUpperCase();
  if (codec !== "H264" && codec !== "H265") invalid('codec must be "H264" or "H265"');
  const layout = request.layout === undefined || request.layout === "" ? "desktop" : request.layout.toLowerCase();
  if (layout !== "desktop" && layout !== "mobile")
    invalid('layout must be "mobile" or left out for the desktop layout');
  const profile = request.profile === undefined || request.profile === "" ? "adaptive" : request.profile.toUpperCase();
  if (profile !== "adaptive" && profile !== "HD") invalid('profile must be "HD" or left out for adaptive bitrate');
  if (request.audio_only && request.multi_bitrate)
    invalid("multi_bitrate transcodes video, so it cannot go with audio_only");
  return {
    codec,
    isLowLatency: request.is_low_latency ?? false,
    isRecording: request.is_recording ?? false,
    multiBitrate: request.multi_bitrate ?? false,
    isVod: request.is_vod ?? false,
    username: request.username ?? false,
    audioOnly: request.audio_only ?? false,
    layout,
    profile,
    reconnectWindow: parseReconnectWindow(request.reconnect_window),
    platforms: (request.stream_keys ?? []).map(({ key }) => key.toLowerCase()),
    destinationCount: (request.stream_keys?.length ?? 0) + (request.stream_urls?.length ?? 0),
  };
}
