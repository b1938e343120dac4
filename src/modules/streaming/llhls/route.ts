/**
 * The answers of a rendition's address (`/llhls/v1/live/:stream/:rendition/:file`), and the
 * way most of them reach it: as a route of Bun's own beside the Elysia app. When a part
 * closes, every viewer of the stream asks at once, first the blocking reload that waited for
 * it, then the part: 500 viewers are 1000 answers one after the other in one process, and
 * the player's part is as late as the last of them. Requests in the form players send
 * (known query members of plain characters, names that match the route's patterns) are
 * answered here with the pipeline's request id, metrics, log line and error shape, without
 * its generic per-request work (lifecycle hooks, schema validation, header merging); any
 * other request goes to the Elysia route, which validates it and answers as before.
 */
import type { BunRequest, Server } from "bun";
import { config } from "../../../core/config";
import { AppError } from "../../../core/errors";
import { errorResponse, recordRequest, requestIdOf } from "../../../http/pipeline";
import { addressCounter, HeldResource, type Release } from "../../limits";
import { LlhlsMediaParams, LlhlsQuery } from "../model";
import { initSegment, mediaPlaylistOf, partOf, segmentOf } from "./origin";
import { isViewerId, viewerSeen } from "./viewers";
import { parseDirectives } from "./window";

export const LLHLS_MEDIA_PATH = "/llhls/v1/live/:stream/:rendition/:file";

/**
 * LL-HLS answers: parts and segments never change once written, so a CDN may keep them;
 * playlists change with every part (a blocking reload's answer is fit for its viewer only);
 * any page may play them.
 */
export const PLAYLIST = "application/vnd.apple.mpegurl";
const IMMUTABLE = "public, max-age=31536000, immutable";

/** `requestId` for an answer made outside the pipeline, which adds it to the others. */
export function media(
  body: string | Buffer | ReadableStream<Uint8Array>,
  type: string,
  cacheControl: string,
  requestId?: string,
  serverTiming?: string,
): Response {
  // A Buffer is a Uint8Array; the DOM types only want it over a
  // plain ArrayBuffer. Not copied: every viewer gets the same bytes.
  const payload = Buffer.isBuffer(body) ? (body as Uint8Array<ArrayBuffer>) : body;
  const headers: Record<string, string> = {
    "content-type": type,
    "cache-control": cacheControl,
    "access-control-allow-origin": "*",
  };
  if (requestId) headers["x-request-id"] = requestId;
  if (serverTiming) headers["server-timing"] = serverTiming;
  return new Response(payload, { headers });
}

export type MediaQuery = typeof LlhlsQuery.static;

/**
 * Requests that may wait for a part (a blocking reload, a part): each holds its connection
 * until the part exists, up to three target durations. Counted per client address, not per
 * `viewer=`, which a client makes up at will.
 */
const waits = new HeldResource({
  resource: "llhls_waits",
  what: "LL-HLS requests waiting for a part",
  perProcess: { name: "llhls.waits.per_process", cap: () => config.limits.held.llhlsWaitsPerProcess },
  callers: [
    {
      name: "llhls.waits.per_address",
      per: "address",
      cap: () => config.limits.held.llhlsWaitsPerAddress,
      refusal: 429,
    },
    { name: "llhls.waits.per_stream", per: "stream", cap: () => config.limits.held.llhlsWaitsPerStream, refusal: 503 },
  ],
  // A player asks again within a part's duration anyway.
  retryAfterSeconds: 1,
  free: "let one be answered",
});

/** The refusals of the waits' caps, for the media route's OpenAPI description. */
export const mediaWaitRefusals = () => waits.answers();

/** Who asks, for the caps: the peer's address (absent in-process) and the request's end. */
export interface MediaClient {
  address?: string;
  /** Aborts when the client goes away: its slot is free, and its wait ended, at once. */
  signal?: AbortSignal;
}

function holdWait(stream: string, client: MediaClient): Release {
  const release = waits.take([client.address === undefined ? undefined : addressCounter(client.address), stream]);
  client.signal?.addEventListener("abort", release, { once: true });
  return () => {
    client.signal?.removeEventListener("abort", release);
    release();
  };
}

async function whileHeld<T>(stream: string, client: MediaClient, work: () => Promise<T>): Promise<T> {
  const release = holdWait(stream, client);
  try {
    return await work();
  } finally {
    release();
  }
}

/** A rendition's media playlist (blocking reloads and delta updates), init segment, segment or part. */
export async function mediaAnswer(
  stream: string,
  rendition: string,
  file: string,
  query: MediaQuery,
  client: MediaClient,
  requestId?: string,
): Promise<Response> {
  if (file === "index.m3u8") {
    const directives = parseDirectives(query);
    if (typeof directives === "string") throw new AppError("bad_request", directives);
    if (isViewerId(query.viewer)) viewerSeen(stream, query.viewer);
    const playlist = () => mediaPlaylistOf(stream, rendition, directives, client.signal);
    // Only a blocking reload waits; a plain one is answered from what the process has.
    const answer = directives.msn === undefined ? await playlist() : await whileHeld(stream, client, playlist);
    // How long a reload that waited took once the part was
    // there: what the origin adds, for operators and benchmarks.
    const timing = answer.afterPartMs === undefined ? undefined : `part;dur=${answer.afterPartMs.toFixed(2)}`;
    return media(answer.text, PLAYLIST, answer.blocking ? "no-store" : "public, max-age=1", requestId, timing);
  }
  if (file === "init.mp4") return media(await initSegment(stream, rendition), "video/mp4", IMMUTABLE, requestId);
  const [msn, part] = file.slice(0, -".m4s".length).split(".").map(Number) as [number, number | undefined];
  if (part === undefined) return media(await segmentOf(stream, rendition, msn), "video/mp4", IMMUTABLE, requestId);
  const answer = await whileHeld(stream, client, () => partOf(stream, rendition, msn, part, client.signal));
  return media("bytes" in answer ? answer.bytes : answer.stream, "video/mp4", IMMUTABLE, requestId);
}

/**
 * What the Elysia route's schema asks of a name (its pattern and lengths), read from that schema:
 * the requests answered here meet it as that route's would.
 */
function matcher(schema: { pattern?: string; minLength?: number; maxLength?: number }): (value: string) => boolean {
  const pattern = new RegExp(schema.pattern ?? "");
  const [least, most] = [schema.minLength ?? 0, schema.maxLength ?? Number.POSITIVE_INFINITY];
  return (value) => value.length >= least && value.length <= most && pattern.test(value);
}
const STREAM = matcher(LlhlsMediaParams.properties.stream);
const RENDITION = matcher(LlhlsMediaParams.properties.rendition);
const FILE = matcher(LlhlsMediaParams.properties.file);
const QUERY_LIMITS = new Map(
  Object.entries(LlhlsQuery.properties).map(([name, schema]) => [name, schema.maxLength ?? 0] as const),
);
/** Values that need neither decoding nor a check for what PostgreSQL could not store. */
const PLAIN = /^[A-Za-z0-9_-]*$/;

/** The query when every member is a known one, given once, of plain characters within its length; else undefined. */
function plainQuery(url: string): MediaQuery | undefined {
  const query: Record<string, string> = {};
  const start = url.indexOf("?");
  if (start < 0) return query;
  for (const member of url.slice(start + 1).split("&")) {
    const equals = member.indexOf("=");
    const name = member.slice(0, equals);
    const value = member.slice(equals + 1);
    const limit = QUERY_LIMITS.get(name);
    if (equals < 0 || limit === undefined || name in query || value.length > limit || !PLAIN.test(value))
      return undefined;
    query[name] = value;
  }
  return query;
}

/** The route for Bun: requests it cannot vouch for are handed to `elysia`, the app's own handling. */
export function llhlsMediaRoute(elysia: (request: Request) => Response | Promise<Response>) {
  return async (request: BunRequest, server: Server<unknown>): Promise<Response> => {
    const { stream, rendition, file } = request.params;
    const query = plainQuery(request.url);
    if (!query || !STREAM(stream) || !RENDITION(rendition) || !FILE(file)) return elysia(request);
    const info = { id: requestIdOf(request), startedAt: performance.now() };
    let response: Response;
    try {
      const client = { address: server.requestIP(request)?.address, signal: request.signal };
      response = await mediaAnswer(stream, rendition, file, query, client, info.id);
    } catch (error) {
      response = errorResponse(error, info.id);
    }
    recordRequest("GET", LLHLS_MEDIA_PATH, response.status, info);
    return response;
  };
}
