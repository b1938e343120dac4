/**
 * Just enough ISO BMFF (ISO/IEC 14496-12) to cut a fragmented MP4 stream into LL-HLS parts:
 * top-level boxes split out of a byte stream, the tracks of the init segment (`moov`), and
 * per fragment (`moof`) each track's decode time, sample durations and whether it starts
 * on a sync sample. Sample data (`mdat`) is never looked into.
 *
 * Written here rather than taken from npm: mp4box.js parses whole files into a browser
 * oriented object model (and buffers samples), the small stream parsers on npm are
 * unmaintained, and what is needed is five box layouts read in place.
 */

export interface Track {
  id: number;
  /** `vide`, `soun`, ... from the handler box. */
  handler: string;
  timescale: number;
  /** trex defaults, used when a fragment leaves them out. */
  defaultDuration: number;
  defaultFlags: number;
}

export interface TrackRun {
  trackId: number;
  decodeTime: number;
  /** Sum of the run's sample durations, in the track's timescale. */
  duration: number;
  /** The first sample is a sync sample (a keyframe for video). */
  startsWithSync: boolean;
}

interface Box {
  type: string;
  /** Start of the payload (after the header) and end of the box, as offsets into the buffer. */
  start: number;
  end: number;
}

/** The boxes directly inside `buffer[from, to)`. */
function children(buffer: Buffer, from: number, to: number): Box[] {
  const boxes: Box[] = [];
  let offset = from;
  while (offset + 8 <= to) {
    let size = buffer.readUInt32BE(offset);
    let header = 8;
    if (size === 1) {
      size = Number(buffer.readBigUInt64BE(offset + 8));
      header = 16;
    } else if (size === 0) {
      size = to - offset;
    }
    if (size < header || offset + size > to)
      throw new Error(`malformed ${buffer.toString("latin1", offset + 4, offset + 8)} box`);
    boxes.push({ type: buffer.toString("latin1", offset + 4, offset + 8), start: offset + header, end: offset + size });
    offset += size;
  }
  return boxes;
}

const child = (buffer: Buffer, box: Box, type: string) =>
  children(buffer, box.start, box.end).find((b) => b.type === type);

/**
 * Splits a byte stream into whole top-level boxes. Boxes declared larger than `maxBoxBytes`
 * end the stream with an error rather than growing the buffer without bound.
 */
export class BoxSplitter {
  private pending: Buffer = Buffer.alloc(0);

  constructor(private readonly maxBoxBytes = 64 * 1024 * 1024) {}

  /** The whole boxes completed by `data`, each as its own buffer (header included). */
  push(data: Buffer): Array<{ type: string; bytes: Buffer }> {
    this.pending = this.pending.length === 0 ? data : Buffer.concat([this.pending, data]);
    const boxes: Array<{ type: string; bytes: Buffer }> = [];
    let offset = 0;
    while (this.pending.length - offset >= 8) {
      let size = this.pending.readUInt32BE(offset);
      if (size === 1) {
        if (this.pending.length - offset < 16) break;
        size = Number(this.pending.readBigUInt64BE(offset + 8));
      }
      if (size < 8 || size > this.maxBoxBytes) throw new Error(`box of ${size} bytes in the media stream`);
      if (this.pending.length - offset < size) break;
      boxes.push({
        type: this.pending.toString("latin1", offset + 4, offset + 8),
        bytes: this.pending.subarray(offset, offset + size),
      });
      offset += size;
    }
    this.pending = this.pending.subarray(offset);
    return boxes;
  }
}

/** The tracks an init segment (`moov` box, header included) declares. */
export function parseMoov(moov: Buffer): Track[] {
  const root = children(moov, 0, moov.length).find((b) => b.type === "moov");
  if (!root) throw new Error("no moov box");
  const defaults = new Map<number, { duration: number; flags: number }>();
  const mvex = child(moov, root, "mvex");
  for (const trex of mvex ? children(moov, mvex.start, mvex.end).filter((b) => b.type === "trex") : []) {
    // version/flags, track_ID, sample_description_index, duration, size, flags
    defaults.set(moov.readUInt32BE(trex.start + 4), {
      duration: moov.readUInt32BE(trex.start + 12),
      flags: moov.readUInt32BE(trex.start + 20),
    });
  }
  const tracks: Track[] = [];
  for (const trak of children(moov, root.start, root.end).filter((b) => b.type === "trak")) {
    const tkhd = child(moov, trak, "tkhd");
    const mdia = child(moov, trak, "mdia");
    const mdhd = mdia && child(moov, mdia, "mdhd");
    const hdlr = mdia && child(moov, mdia, "hdlr");
    if (!tkhd || !mdhd || !hdlr) throw new Error("a track without tkhd, mdhd or hdlr");
    // Version 1 boxes carry 64-bit creation and modification times before the fields we read.
    const id = moov.readUInt32BE(tkhd.start + (moov[tkhd.start] === 1 ? 20 : 12));
    const timescale = moov.readUInt32BE(mdhd.start + (moov[mdhd.start] === 1 ? 20 : 12));
    const handler = moov.toString("latin1", hdlr.start + 8, hdlr.start + 12);
    const trex = defaults.get(id) ?? { duration: 0, flags: 0 };
    tracks.push({ id, handler, timescale, defaultDuration: trex.duration, defaultFlags: trex.flags });
  }
  return tracks;
}

/** bit 16 of the sample flags: sample_is_non_sync_sample. */
const isSync = (flags: number) => (flags & 0x10000) === 0;

/** Each track's run in one `moof` box (header included). */
export function parseMoof(moof: Buffer, tracks: Track[]): TrackRun[] {
  const root = children(moof, 0, moof.length).find((b) => b.type === "moof");
  if (!root) throw new Error("no moof box");
  const runs: TrackRun[] = [];
  for (const traf of children(moof, root.start, root.end).filter((b) => b.type === "traf")) {
    const tfhd = child(moof, traf, "tfhd");
    if (!tfhd) throw new Error("a traf without tfhd");
    const tfhdFlags = moof.readUInt32BE(tfhd.start) & 0xffffff;
    const trackId = moof.readUInt32BE(tfhd.start + 4);
    const track = tracks.find((t) => t.id === trackId);
    let cursor = tfhd.start + 8;
    if (tfhdFlags & 0x1) cursor += 8; // base_data_offset
    if (tfhdFlags & 0x2) cursor += 4; // sample_description_index
    let defaultDuration = track?.defaultDuration ?? 0;
    if (tfhdFlags & 0x8) {
      defaultDuration = moof.readUInt32BE(cursor);
      cursor += 4;
    }
    if (tfhdFlags & 0x10) cursor += 4; // default_sample_size
    let defaultFlags = track?.defaultFlags ?? 0;
    if (tfhdFlags & 0x20) defaultFlags = moof.readUInt32BE(cursor);

    const tfdt = child(moof, traf, "tfdt");
    const decodeTime = !tfdt
      ? 0
      : moof[tfdt.start] === 1
        ? Number(moof.readBigUInt64BE(tfdt.start + 4))
        : moof.readUInt32BE(tfdt.start + 4);
    let duration = 0;
    let startsWithSync: boolean | undefined;
    for (const trun of children(moof, traf.start, traf.end).filter((b) => b.type === "trun")) {
      const flags = moof.readUInt32BE(trun.start) & 0xffffff;
      const count = moof.readUInt32BE(trun.start + 4);
      let at = trun.start + 8;
      if (flags & 0x1) at += 4; // data_offset
      let firstFlags: number | undefined;
      if (flags & 0x4) {
        firstFlags = moof.readUInt32BE(at);
        at += 4;
      }
      for (let i = 0; i < count; i++) {
        let sampleDuration = defaultDuration;
        let sampleFlags = i === 0 && firstFlags !== undefined ? firstFlags : defaultFlags;
        if (flags & 0x100) {
          sampleDuration = moof.readUInt32BE(at);
          at += 4;
        }
        if (flags & 0x200) at += 4; // sample_size
        if (flags & 0x400) {
          const own = moof.readUInt32BE(at);
          if (!(i === 0 && firstFlags !== undefined)) sampleFlags = own;
          at += 4;
        }
        if (flags & 0x800) at += 4; // composition time offset
        if (startsWithSync === undefined) startsWithSync = isSync(sampleFlags);
        duration += sampleDuration;
      }
    }
    runs.push({ trackId, decodeTime, duration, startsWithSync: startsWithSync ?? false });
  }
  return runs;
}
