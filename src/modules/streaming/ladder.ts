/**
 * The multi_bitrate ladder of the spec (2.2): five variants named by their total bandwidth.
 * Each variant is published as its own RTMP stream `<stream_name><suffix>`; the media
 * server's `hls_variant` lines (one per suffix, see README) join them into the master
 * playlist `<stream_name>.m3u8`. Suffixes never end with one another, so a published name
 * maps back to exactly one stream.
 */
export interface Variant {
  label: "HD" | "HD_MID" | "MID" | "MID_LOW" | "LOW";
  suffix: string;
  width: number;
  height: number;
  /** Total bandwidth the spec names, in kbps: video plus audio. */
  totalKbps: number;
  audioKbps: number;
}

export const BITRATE_LADDER: readonly Variant[] = [
  { label: "HD", suffix: "_720p2628", width: 1280, height: 720, totalKbps: 2628, audioKbps: 128 },
  { label: "HD_MID", suffix: "_480p1128", width: 854, height: 480, totalKbps: 1128, audioKbps: 128 },
  { label: "MID", suffix: "_360p878", width: 640, height: 360, totalKbps: 878, audioKbps: 128 },
  { label: "MID_LOW", suffix: "_240p528", width: 426, height: 240, totalKbps: 528, audioKbps: 128 },
  { label: "LOW", suffix: "_240p264", width: 426, height: 240, totalKbps: 264, audioKbps: 64 },
];

/** The stream a published RTMP name belongs to: the name itself or the name without a variant suffix. */
export function baseStreamName(published: string): string {
  const variant = BITRATE_LADDER.find((candidate) => published.endsWith(candidate.suffix));
  return variant ? published.slice(0, -variant.suffix.length) : published;
}
