/**
 * A Low-Latency HLS media playlist checker written from RFC 8216bis's rules, independent of
 * Parley's renderer: it parses the text itself and checks one playlist (`checkPlaylist`) and
 * a run of reloads of one rendition (`ReloadHistory`), answering the rules broken.
 */

export interface ParsedPart {
  duration: number;
  uri: string;
  independent: boolean;
}

export interface ParsedSegment {
  msn: number;
  duration?: number;
  uri?: string;
  programDateTime?: number;
  parts: ParsedPart[];
}

export interface ParsedPlaylist {
  version?: number;
  targetDuration?: number;
  partTarget?: number;
  mediaSequence: number;
  serverControl: Record<string, string>;
  skipped: number;
  map?: string;
  segments: ParsedSegment[];
  preloadHint?: string;
  renditionReports: Array<Record<string, string>>;
  ended: boolean;
}

function attributes(text: string): Record<string, string> {
  const found: Record<string, string> = {};
  for (const match of text.matchAll(/([A-Z0-9-]+)=("[^"]*"|[^,]*)/g))
    found[match[1]!] = match[2]!.replace(/^"|"$/g, "");
  return found;
}

/** The media sequence number and part index a part's URI names (`<msn>.<part>.m4s`). */
export const partOf = (uri: string) =>
  uri
    .replace(/\.m4s$/, "")
    .split(".")
    .map(Number) as [number, number];

export function parsePlaylist(text: string): ParsedPlaylist {
  const lines = text
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "");
  if (lines[0] !== "#EXTM3U") throw new Error("a playlist must begin with #EXTM3U");
  const playlist: ParsedPlaylist = {
    mediaSequence: 0,
    serverControl: {},
    skipped: 0,
    segments: [],
    renditionReports: [],
    ended: false,
  };
  let current: ParsedSegment | undefined;
  const segment = () => {
    current ??= { msn: playlist.mediaSequence + playlist.skipped + playlist.segments.length, parts: [] };
    return current;
  };
  let pendingDuration: number | undefined;
  for (const line of lines.slice(1)) {
    const [tag, value = ""] = line.startsWith("#")
      ? [line.slice(0, line.indexOf(":") < 0 ? undefined : line.indexOf(":")), line.slice(line.indexOf(":") + 1)]
      : [line];
    switch (tag) {
      case "#EXT-X-VERSION":
        playlist.version = Number(value);
        break;
      case "#EXT-X-TARGETDURATION":
        playlist.targetDuration = Number(value);
        break;
      case "#EXT-X-PART-INF":
        playlist.partTarget = Number(attributes(value)["PART-TARGET"]);
        break;
      case "#EXT-X-MEDIA-SEQUENCE":
        playlist.mediaSequence = Number(value);
        break;
      case "#EXT-X-SERVER-CONTROL":
        playlist.serverControl = attributes(value);
        break;
      case "#EXT-X-SKIP":
        playlist.skipped = Number(attributes(value)["SKIPPED-SEGMENTS"]);
        break;
      case "#EXT-X-MAP":
        playlist.map = attributes(value).URI;
        break;
      case "#EXT-X-PROGRAM-DATE-TIME":
        segment().programDateTime = Date.parse(value);
        break;
      case "#EXT-X-PART": {
        const a = attributes(value);
        segment().parts.push({ duration: Number(a.DURATION), uri: a.URI!, independent: a.INDEPENDENT === "YES" });
        break;
      }
      case "#EXTINF":
        pendingDuration = Number(value.split(",")[0]);
        break;
      case "#EXT-X-PRELOAD-HINT":
        playlist.preloadHint = attributes(value).URI;
        break;
      case "#EXT-X-RENDITION-REPORT":
        playlist.renditionReports.push(attributes(value));
        break;
      case "#EXT-X-ENDLIST":
        playlist.ended = true;
        break;
      default:
        if (!line.startsWith("#")) {
          const s = segment();
          s.uri = line;
          s.duration = pendingDuration;
          playlist.segments.push(s);
          current = undefined;
          pendingDuration = undefined;
        }
    }
  }
  // Parts after the last whole segment belong to the segment being written.
  if (current) playlist.segments.push(current);
  return playlist;
}

const TOLERANCE = 0.0015;

/** The rules one playlist must keep on its own. */
export function checkPlaylist(p: ParsedPlaylist): string[] {
  const problems: string[] = [];
  if (p.targetDuration === undefined) problems.push("no EXT-X-TARGETDURATION");
  if (p.partTarget === undefined || !(p.partTarget > 0)) problems.push("no EXT-X-PART-INF PART-TARGET");
  if (p.serverControl["CAN-BLOCK-RELOAD"] !== "YES") problems.push("EXT-X-SERVER-CONTROL lacks CAN-BLOCK-RELOAD=YES");
  const holdBack = Number(p.serverControl["PART-HOLD-BACK"]);
  if (!(holdBack >= 2 * (p.partTarget ?? Infinity)))
    problems.push(`PART-HOLD-BACK ${holdBack} is under twice the part target`);
  const skipUntil = Number(p.serverControl["CAN-SKIP-UNTIL"]);
  if (!(skipUntil >= 6 * (p.targetDuration ?? Infinity)))
    problems.push(`CAN-SKIP-UNTIL ${skipUntil} is under six target durations`);
  if (!p.map) problems.push("no EXT-X-MAP for the fMP4 init segment");
  if (!p.ended && !p.preloadHint) problems.push("a live playlist without EXT-X-PRELOAD-HINT");
  let previousEnd: number | undefined;
  p.segments.forEach((segment, index) => {
    const last = index === p.segments.length - 1;
    if (
      segment.duration !== undefined &&
      p.targetDuration !== undefined &&
      Math.round(segment.duration) > p.targetDuration
    ) {
      problems.push(`segment ${segment.msn} lasts ${segment.duration} s, over the target duration ${p.targetDuration}`);
    }
    for (const part of segment.parts) {
      if (p.partTarget !== undefined && part.duration > p.partTarget + TOLERANCE)
        problems.push(`a part of segment ${segment.msn} lasts ${part.duration} s, over PART-TARGET ${p.partTarget}`);
    }
    if (segment.parts.length > 0 && segment.duration !== undefined) {
      const sum = segment.parts.reduce((s, part) => s + part.duration, 0);
      if (Math.abs(sum - segment.duration) > TOLERANCE * segment.parts.length)
        problems.push(`segment ${segment.msn}: parts add up to ${sum.toFixed(5)} s, EXTINF says ${segment.duration}`);
    }
    if (segment.parts.length > 0 && !segment.parts[0]!.independent)
      problems.push(`segment ${segment.msn} does not begin with an INDEPENDENT part`);
    if (segment.duration === undefined && !last)
      problems.push(`segment ${segment.msn} has no EXTINF but is not the last`);
    if (segment.programDateTime === undefined) problems.push(`segment ${segment.msn} has no EXT-X-PROGRAM-DATE-TIME`);
    if (
      previousEnd !== undefined &&
      segment.programDateTime !== undefined &&
      Math.abs(segment.programDateTime - previousEnd) > 50
    ) {
      problems.push(
        `segment ${segment.msn}'s program date time jumps ` +
          `${segment.programDateTime - previousEnd} ms from its predecessor's end`,
      );
    }
    previousEnd =
      segment.programDateTime !== undefined && segment.duration !== undefined
        ? segment.programDateTime + segment.duration * 1000
        : undefined;
  });
  // Parts are listed for the most recent segments without a gap: once a segment lists parts, every later one does.
  const firstWithParts = p.segments.findIndex((s) => s.parts.length > 0);
  if (firstWithParts >= 0 && p.segments.slice(firstWithParts).some((s) => s.parts.length === 0))
    problems.push("a segment after one with parts lists none");
  return problems;
}

/** A run of reloads of one rendition: what must hold from one playlist to the next. */
export class ReloadHistory {
  readonly problems: string[] = [];
  private partTarget: number | undefined;
  private targetDuration: number | undefined;
  private mediaSequence = -1;
  private lastMsn = -1;
  private readonly segments = new Map<number, { duration?: number; uri?: string; pdt?: number; parts: ParsedPart[] }>();
  reloads = 0;

  add(p: ParsedPlaylist, label: string): void {
    this.reloads++;
    for (const problem of checkPlaylist(p)) this.problems.push(`${label}: ${problem}`);
    if (this.partTarget !== undefined && p.partTarget !== this.partTarget)
      this.problems.push(`${label}: PART-TARGET changed from ${this.partTarget} to ${p.partTarget}`);
    this.partTarget ??= p.partTarget;
    if (this.targetDuration !== undefined && p.targetDuration !== this.targetDuration)
      this.problems.push(`${label}: TARGETDURATION changed`);
    this.targetDuration ??= p.targetDuration;
    if (p.mediaSequence < this.mediaSequence)
      this.problems.push(`${label}: MEDIA-SEQUENCE went back from ${this.mediaSequence} to ${p.mediaSequence}`);
    this.mediaSequence = Math.max(this.mediaSequence, p.mediaSequence);
    const lastMsn = p.segments.at(-1)?.msn ?? -1;
    if (lastMsn < this.lastMsn)
      this.problems.push(`${label}: the last segment went back from ${this.lastMsn} to ${lastMsn}`);
    this.lastMsn = Math.max(this.lastMsn, lastMsn);
    for (const segment of p.segments) {
      const seen = this.segments.get(segment.msn);
      if (seen) {
        if (seen.duration !== undefined && segment.duration !== undefined && seen.duration !== segment.duration)
          this.problems.push(`${label}: segment ${segment.msn} changed its duration`);
        if (seen.uri !== undefined && segment.uri !== undefined && seen.uri !== segment.uri)
          this.problems.push(`${label}: segment ${segment.msn} changed its URI`);
        if (seen.pdt !== undefined && segment.programDateTime !== undefined && seen.pdt !== segment.programDateTime)
          this.problems.push(`${label}: segment ${segment.msn} changed its program date time`);
        segment.parts.forEach((part, i) => {
          const before = seen.parts[i];
          if (
            before &&
            (before.uri !== part.uri || before.duration !== part.duration || before.independent !== part.independent)
          ) {
            this.problems.push(`${label}: part ${i} of segment ${segment.msn} changed`);
          }
        });
      }
      this.segments.set(segment.msn, {
        duration: segment.duration ?? seen?.duration,
        uri: segment.uri ?? seen?.uri,
        pdt: segment.programDateTime ?? seen?.pdt,
        parts: segment.parts.length >= (seen?.parts.length ?? 0) ? segment.parts : seen!.parts,
      });
    }
  }

  /** Whole segments seen, with their durations. */
  completeSegments(): number {
    return [...this.segments.values()].filter((s) => s.duration !== undefined).length;
  }
}

/**
 * A delta update (EXT-X-SKIP) equals its full playlist with the skipped segments left out:
 * same header, same media sequence, the same segments from the skip on.
 */
export function deltaMatches(full: ParsedPlaylist, delta: ParsedPlaylist): string[] {
  const problems: string[] = [];
  if (delta.skipped === 0) problems.push("the delta update skipped nothing");
  if (delta.mediaSequence !== full.mediaSequence) problems.push("the delta update has another MEDIA-SEQUENCE");
  if (delta.partTarget !== full.partTarget || delta.targetDuration !== full.targetDuration)
    problems.push("the delta update has another header");
  const rest = full.segments.slice(delta.skipped);
  if (JSON.stringify(rest) !== JSON.stringify(delta.segments))
    problems.push("the delta update's segments differ from the full playlist's");
  if (delta.preloadHint !== full.preloadHint) problems.push("the delta update has another preload hint");
  return problems;
}
