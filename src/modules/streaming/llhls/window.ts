/**
 * A rendition's LL-HLS playlist window and what RFC 8216bis makes of it: the media playlist
 * (full or delta), the multivariant playlist, and the answer a blocking reload gets.
 */

export interface PartEntry {
  /** Seconds. */
  duration: number;
  /** Starts with a sync sample, so playback can begin with it. */
  independent: boolean;
}

export interface SegmentEntry {
  msn: number;
  /** Wall clock of the segment's first frame, in ms. */
  programDateTime: number;
  /** Seconds: the sum of its parts. */
  duration: number;
  parts: PartEntry[];
  complete: boolean;
}

export interface RenditionWindow {
  /** Seconds; fixed for the life of the stream. */
  partTarget: number;
  /** Whole seconds (EXT-X-TARGETDURATION). */
  targetDuration: number;
  /** Oldest first; the last one may still be growing. */
  segments: SegmentEntry[];
  /** The part the next bytes go into: the preload hint. */
  next: { msn: number; part: number };
  ended: boolean;
}

/** Parts are listed for the segments this close to the end (RFC 8216bis: at most three target durations back). */
const PART_SEGMENTS = 3;
/** PART-HOLD-BACK in part targets: the RFC asks for at least two and recommends three. */
const PART_HOLD_BACK_PARTS = 3;
/** Blocking reloads and requests ahead give up after this many target durations (RFC 8216bis 6.2.5.2). */
export const BLOCK_TARGET_DURATIONS = 3;
/** CAN-SKIP-UNTIL in target durations: the RFC's minimum of six. */
export const SKIP_TARGET_DURATIONS = 6;

const partUri = (msn: number, part: number) => `${msn}.${part}.m4s`;
const segmentUri = (msn: number) => `${msn}.m4s`;

/**
 * Durations to the 10 µs, rounded down: a part listed as ending after its media (by the
 * microseconds of a stretched first frame) made hls.js find its buffer short of the part's
 * end, load that part again and again, and stall at the segment's end.
 */
const decimal = (seconds: number) => (Math.floor(seconds * 1e5 + 1e-6) / 1e5).toFixed(5).replace(/0{1,3}$/, "");

/** The last whole part the window lists, as rendition reports give it. */
function lastPart(window: RenditionWindow): { msn: number; part: number } | undefined {
  const { next } = window;
  if (next.part > 0) return { msn: next.msn, part: next.part - 1 };
  const previous = window.segments.find((s) => s.msn === next.msn - 1);
  return previous && previous.parts.length > 0 ? { msn: previous.msn, part: previous.parts.length - 1 } : undefined;
}

/** Whether the window holds part `part` of segment `msn` (or the whole segment when no part is named). */
export function holds(window: RenditionWindow, msn: number, part?: number): boolean {
  if (msn < window.next.msn) return true;
  if (msn > window.next.msn) return false;
  if (part === undefined) return window.ended && window.segments.at(-1)?.msn === msn;
  return part < window.next.part || (window.ended && part < (window.segments.at(-1)?.parts.length ?? 0));
}

export interface Directives {
  msn?: number;
  part?: number;
  skip: boolean;
}

/** `_HLS_msn`, `_HLS_part`, `_HLS_skip` from a playlist request, or a message saying why they are wrong. */
export function parseDirectives(query: Record<string, string | undefined>): Directives | string {
  const number = (value: string | undefined) =>
    value !== undefined && /^\d{1,15}$/.test(value) ? Number(value) : undefined;
  const msn = number(query._HLS_msn);
  const part = number(query._HLS_part);
  if (query._HLS_msn !== undefined && msn === undefined) return "_HLS_msn must be a whole number";
  if (query._HLS_part !== undefined && part === undefined) return "_HLS_part must be a whole number";
  if (part !== undefined && msn === undefined) return "_HLS_part needs _HLS_msn";
  const skip = query._HLS_skip;
  if (skip !== undefined && skip !== "YES" && skip !== "v2") return "_HLS_skip must be YES or v2";
  return { msn, part, skip: skip !== undefined };
}

/**
 * What a blocking reload for (msn, part) gets now: the playlist, a wait, or 400 because it
 * asks too far ahead (more than two segments past the last one, or a part more than three
 * past the preload hint), as RFC 8216bis 6.2.5.2 has it.
 */
export function blockingAnswer(
  window: RenditionWindow,
  msn: number,
  part: number | undefined,
): "ready" | "wait" | "too_far" {
  if (window.ended || holds(window, msn, part)) return "ready";
  const last = window.segments.at(-1)?.msn ?? window.next.msn;
  if (msn > last + 2) return "too_far";
  if (msn === window.next.msn && part !== undefined && part > window.next.part + 3) return "too_far";
  return "wait";
}

interface RenditionReport {
  uri: string;
  window: RenditionWindow;
}

/** The media playlist; with `skip`, the delta update that leaves out what is older than CAN-SKIP-UNTIL. */
export function mediaPlaylist(window: RenditionWindow, options: { skip: boolean; reports: RenditionReport[] }): string {
  const listed = window.segments.filter((s) => s.parts.length > 0);
  const skipUntil = SKIP_TARGET_DURATIONS * window.targetDuration;
  const lines = [
    "#EXTM3U",
    "#EXT-X-VERSION:9",
    `#EXT-X-TARGETDURATION:${window.targetDuration}`,
    `#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,CAN-SKIP-UNTIL=${decimal(skipUntil)},` +
      `PART-HOLD-BACK=${decimal(window.partTarget * PART_HOLD_BACK_PARTS)}`,
    `#EXT-X-PART-INF:PART-TARGET=${decimal(window.partTarget)}`,
    `#EXT-X-MEDIA-SEQUENCE:${listed[0]?.msn ?? window.next.msn}`,
    '#EXT-X-MAP:URI="init.mp4"',
  ];
  let skipped = 0;
  if (options.skip) {
    // A segment may be skipped when everything after it still spans the skip boundary.
    let after = listed.reduce((sum, s) => sum + s.duration, 0);
    for (const segment of listed) {
      after -= segment.duration;
      if (after < skipUntil || !segment.complete) break;
      skipped++;
    }
    if (skipped > 0) lines.push(`#EXT-X-SKIP:SKIPPED-SEGMENTS=${skipped}`);
  }
  const partsFrom = (listed.at(-1)?.msn ?? 0) - (PART_SEGMENTS - 1);
  for (const segment of listed.slice(skipped)) {
    lines.push(`#EXT-X-PROGRAM-DATE-TIME:${new Date(segment.programDateTime).toISOString()}`);
    if (segment.msn >= partsFrom) {
      segment.parts.forEach((part, index) => {
        const independent = part.independent ? ",INDEPENDENT=YES" : "";
        lines.push(`#EXT-X-PART:DURATION=${decimal(part.duration)},URI="${partUri(segment.msn, index)}"${independent}`);
      });
    }
    if (segment.complete) lines.push(`#EXTINF:${decimal(segment.duration)},`, segmentUri(segment.msn));
  }
  if (window.ended) {
    lines.push("#EXT-X-ENDLIST");
  } else {
    lines.push(`#EXT-X-PRELOAD-HINT:TYPE=PART,URI="${partUri(window.next.msn, window.next.part)}"`);
  }
  for (const report of options.reports) {
    const last = lastPart(report.window);
    if (last) lines.push(`#EXT-X-RENDITION-REPORT:URI="${report.uri}",LAST-MSN=${last.msn},LAST-PART=${last.part}`);
  }
  return `${lines.join("\n")}\n`;
}

interface VariantEntry {
  uri: string;
  bandwidth: number;
  width?: number;
  height?: number;
  codecs: string;
}

/** The multivariant playlist: one variant per rendition, best first. */
export function multivariantPlaylist(variants: VariantEntry[]): string {
  const lines = ["#EXTM3U", "#EXT-X-VERSION:9", "#EXT-X-INDEPENDENT-SEGMENTS"];
  for (const variant of variants) {
    const resolution = variant.width && variant.height ? `,RESOLUTION=${variant.width}x${variant.height}` : "";
    lines.push(`#EXT-X-STREAM-INF:BANDWIDTH=${variant.bandwidth}${resolution},CODECS="${variant.codecs}"`, variant.uri);
  }
  return `${lines.join("\n")}\n`;
}

/** The RFC 6381 codecs of an init segment: avc1.PPCCLL from its avcC box, mp4a.40.2 (AAC-LC) for its audio. */
export function codecsOf(init: Buffer): string {
  const codecs: string[] = [];
  const avcC = init.indexOf("avcC", 0, "latin1");
  if (avcC >= 0) codecs.push(`avc1.${init.subarray(avcC + 5, avcC + 8).toString("hex")}`);
  if (init.indexOf("mp4a", 0, "latin1") >= 0) codecs.push("mp4a.40.2");
  return codecs.join(",");
}
