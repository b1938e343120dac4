/**
 * Cuts one rendition's fragmented MP4 (an init segment, then moof+mdat fragments of about a
 * frame each) into LL-HLS segments and parts, and keeps the playlist window they make.
 *
 * Boundaries are decided when a fragment has been written, for the fragment that comes next,
 * so the preload hint always names the part the next bytes go into: a part closes once one
 * more fragment would take it past the part target, a segment closes at each multiple of the
 * segment duration of media time (where the recorder forces a keyframe). Within a segment the
 * recorder forces one every `keyframeS` on the parts' grid, and each keyframe starts a part
 * (closing the one being written if it does not fall on the grid), which is then independent.
 *
 * Nothing is announced until the first segment is complete: a player joining then finds a
 * whole segment behind the live edge, enough for its hold-back, and every hint it sees is on
 * the keyframe schedule (the first segment's end is not foreseen, see `keyframe`). A first
 * segment that came in a burst (a backlog at start-up) says little of when its frames were
 * made, so then the next one is waited for too (see `closeSegment`).
 */
import { BoxSplitter, parseMoof, parseMoov, type Track, type TrackRun } from "./fmp4";
import type { RenditionWindow, SegmentEntry } from "./window";

export interface CutterOptions {
  partTargetS: number;
  segmentS: number;
  /** Media time between the recorder's keyframes within a segment; `segmentS` for one a segment. */
  keyframeS: number;
  /** Complete segments kept in the playlist. */
  windowSegments: number;
  now?: () => number;
}

export interface CutterEvents {
  init(bytes: Buffer): void;
  /** Bytes appended to the part being written (the one the preload hint names). */
  chunk(msn: number, part: number, bytes: Buffer): void;
  /** A part was closed: the window as it now stands. */
  part(window: RenditionWindow): void;
}

/** Media time is compared in seconds; this absorbs rounding of timescale ticks. */
const EPSILON = 0.001;
/** A segment whose frames arrived over less than this share of its duration came in a burst. */
const STEADY_SHARE = 0.75;
/** The stream is announced after this many segments at most, steady or not. */
const MOST_SEGMENTS_UNANNOUNCED = 3;

export class Cutter {
  private readonly splitter = new BoxSplitter();
  private tracks: Track[] = [];
  private timing: Track | undefined;
  private header: Buffer[] = [];
  private pendingMoof: Buffer | undefined;
  private anchorMs: number | undefined;
  private firstTime: number | undefined;
  private segments: SegmentEntry[] = [];
  /** The part being written: its segment's number and index, and where it started. */
  private open = { msn: 0, part: 0, start: 0, duration: 0, bytes: 0, independent: false, sawTiming: false };
  /** Media time of the current segment's first frame, and where the next segment is due. */
  private segmentStartTime: number | undefined;
  private nextBoundary: number | undefined;
  /** Segment-opening keyframes so far, and keyframes seen in the current segment. */
  private segmentKeyframes = 0;
  private keyframesInSegment = 0;
  private lastKeyframe: number | undefined;
  /** Wall clock of the current segment's first fragment. */
  private segmentArrivedAt: number | undefined;
  /** Media time of the first segment's start. */
  private streamStartTime: number | undefined;
  private announced = false;
  private lastFragment = 0;
  private ended = false;

  constructor(
    private readonly options: CutterOptions,
    private readonly events: CutterEvents,
  ) {}

  private now(): number {
    return (this.options.now ?? Date.now)();
  }

  push(data: Buffer): void {
    for (const box of this.splitter.push(data)) {
      if (this.tracks.length === 0) {
        this.header.push(box.bytes);
        if (box.type === "moov") {
          this.tracks = parseMoov(box.bytes);
          this.timing = this.tracks.find((t) => t.handler === "vide") ?? this.tracks[0];
          this.events.init(Buffer.concat(this.header));
        }
      } else if (box.type === "moof") {
        this.pendingMoof = box.bytes;
      } else if (box.type === "mdat" && this.pendingMoof) {
        this.fragment(this.pendingMoof, box.bytes);
        this.pendingMoof = undefined;
      }
      // Anything else between fragments (styp, sidx, prft, free) carries nothing a part needs.
    }
  }

  private fragment(moof: Buffer, mdat: Buffer): void {
    const timing = this.timing!;
    const video = timing.handler === "vide";
    const run = parseMoof(moof, this.tracks).find((r) => r.trackId === timing.id);
    if (this.firstTime === undefined && !this.startsCleanly(run, timing)) return;
    const bytes = Buffer.concat([moof, mdat]);
    if (run && this.firstTime === undefined) {
      this.firstTime = run.decodeTime / timing.timescale;
      // Audio has no keyframes to learn the schedule from: it starts with the stream.
      if (!video) this.nextBoundary = this.firstTime + this.options.segmentS;
    }
    if (run) {
      const start = run.decodeTime / timing.timescale;
      const duration = run.duration / timing.timescale;
      // Media time zero on the wall clock is estimated from the frames that come before the
      // stream is announced: each arrives some time after it was made (encoding, the pipe,
      // and at start-up a backlog the encoder works off), never before, so the smallest
      // arrival-minus-media-time is the closest; it errs late by the quickest frame's trip
      // through encoder and pipe. Fixed once the stream is announced, since program date
      // times never change.
      if (!this.announced) {
        this.anchorMs = Math.min(this.anchorMs ?? Number.POSITIVE_INFINITY, this.now() - (start + duration) * 1000);
      }
      if (video && run.startsWithSync) this.keyframe(start);
      const open = this.open;
      if (!open.sawTiming) {
        open.independent = !video || run.startsWithSync;
        open.sawTiming = true;
        open.start = start;
      }
      open.duration = start + duration - open.start;
      this.segmentStartTime ??= start;
      this.streamStartTime ??= start;
      this.segmentArrivedAt ??= this.now();
      // The next fragment is taken to last as long as this one (a frame, for video).
      if (duration > 0) this.lastFragment = duration;
    }
    const open = this.open;
    open.bytes += bytes.length;
    this.events.chunk(open.msn, open.part, bytes);
    if (!run || !open.sawTiming) return;

    const end = open.start + open.duration;
    if (this.nextBoundary !== undefined && end + this.lastFragment / 2 >= this.nextBoundary) {
      this.closePart(false);
      this.closeSegment();
    } else if (open.duration + this.lastFragment > this.options.partTargetS + EPSILON) {
      this.closePart();
    }
  }

  /**
   * The stream starts at a fragment of the timing track that can open a part: a keyframe (for
   * video) no longer than the part target. What comes before is dropped: a stream pulled
   * from a media server begins with a burst whose first frame may span seconds.
   */
  private startsCleanly(run: TrackRun | undefined, timing: Track): boolean {
    if (!run) return false;
    if (timing.handler === "vide" && !run.startsWithSync) return false;
    return run.duration / timing.timescale <= this.options.partTargetS + EPSILON;
  }

  /**
   * A keyframe at `start`. One that comes as a segment begins (the boundary closed it just
   * before) opens that segment, and the next boundary is learnt from it. Any other opens a
   * part of its own (independent), or a new segment when it is the recorder's segment
   * keyframe: that is how the first segment ends, whose end is not foreseen (also when the
   * stream was joined between segment keyframes), and how a keyframe off the schedule is
   * followed. The segment keyframe is told by the schedule: the segment already holds as many
   * keyframes as the schedule puts in one and is half done, or it comes sooner after the
   * previous keyframe than the schedule's interval (a segment that is not a whole number of
   * keyframe intervals ends with a shorter one).
   */
  private keyframe(start: number): void {
    const open = this.open;
    const { segmentS, keyframeS } = this.options;
    const sinceLast = start - (this.lastKeyframe ?? Number.NEGATIVE_INFINITY);
    this.lastKeyframe = start;
    let opensSegment = open.part === 0 && !open.sawTiming;
    if (!opensSegment) {
      const perSegment = Math.ceil(segmentS / keyframeS - EPSILON);
      const endsShort = segmentS - (perSegment - 1) * keyframeS < keyframeS - EPSILON;
      const elapsed = start - (this.segmentStartTime ?? start);
      opensSegment =
        (this.keyframesInSegment >= perSegment && elapsed >= segmentS / 2) ||
        (endsShort && sinceLast < keyframeS - this.lastFragment / 2);
      if (opensSegment) {
        this.closePart(false);
        this.closeSegment();
      } else {
        this.closePart();
        this.keyframesInSegment++;
        return;
      }
    }
    this.keyframesInSegment = 1;
    // The first keyframe's time says little: encoders stretch the first frame (here by up to
    // one frame), so the schedule is learnt from the second segment's; until then the first
    // segment ends when its keyframe arrives, and that one preload hint misses.
    this.nextBoundary = this.segmentKeyframes++ === 0 ? undefined : start + this.options.segmentS;
  }

  private currentSegment(): SegmentEntry {
    let segment = this.segments.at(-1);
    if (!segment || segment.complete) {
      segment = {
        msn: this.open.msn,
        programDateTime: Math.round(this.anchorMs! + (this.segmentStartTime ?? 0) * 1000),
        duration: 0,
        parts: [],
        complete: false,
      };
      this.segments.push(segment);
    }
    return segment;
  }

  /** Closes the part being written, if it holds anything; `announce` is false when the segment closes with it. */
  private closePart(announce = true): void {
    const open = this.open;
    if (open.bytes === 0) return;
    const segment = this.currentSegment();
    segment.parts.push({ duration: open.duration, independent: open.independent });
    segment.duration = segment.parts.reduce((sum, p) => sum + p.duration, 0);
    this.open = {
      msn: open.msn,
      part: open.part + 1,
      start: open.start + open.duration,
      duration: 0,
      bytes: 0,
      independent: false,
      sawTiming: false,
    };
    if (announce) this.announce();
  }

  /** Tells of the window as it now stands, once the stream is announced. */
  private announce(): void {
    if (this.announced) this.events.part(this.window());
  }

  private closeSegment(): void {
    const segment = this.segments.at(-1);
    if (!segment || segment.complete) return;
    segment.complete = true;
    if (!this.announced) {
      // Dated again by the anchor as estimated so far; announced once a segment came at the
      // pace of its media (or after a few, should the source run faster than that).
      let start = this.streamStartTime ?? 0;
      for (const earlier of this.segments) {
        earlier.programDateTime = Math.round(this.anchorMs! + start * 1000);
        start += earlier.duration;
      }
      const arrivedOver = this.now() - (this.segmentArrivedAt ?? this.now());
      this.announced =
        arrivedOver >= segment.duration * 1000 * STEADY_SHARE || this.segments.length >= MOST_SEGMENTS_UNANNOUNCED;
    }
    this.segmentArrivedAt = undefined;
    this.segmentStartTime = undefined;
    this.keyframesInSegment = 0;
    // Provisional: the keyframe that should open the next segment moves it to where it really is.
    if (this.nextBoundary !== undefined) this.nextBoundary += this.options.segmentS;
    this.open = {
      msn: segment.msn + 1,
      part: 0,
      start: 0,
      duration: 0,
      bytes: 0,
      independent: false,
      sawTiming: false,
    };
    const complete = this.segments.filter((s) => s.complete);
    if (complete.length > this.options.windowSegments)
      this.segments.splice(0, complete.length - this.options.windowSegments);
    this.announce();
  }

  /** The stream ended: the part being written is closed and the playlist gets its end. */
  finish(): RenditionWindow | undefined {
    if (this.ended || this.anchorMs === undefined || this.firstTime === undefined) return undefined;
    this.closePart(false);
    const segment = this.segments.at(-1);
    if (segment) segment.complete = true;
    this.ended = true;
    const window = this.window();
    this.events.part(window);
    return window;
  }

  window(): RenditionWindow {
    return {
      partTarget: this.options.partTargetS,
      targetDuration: Math.ceil(this.options.segmentS - EPSILON),
      segments: this.segments.map((s) => ({ ...s, parts: [...s.parts] })),
      next: { msn: this.open.msn, part: this.open.part },
      ended: this.ended,
    };
  }
}
