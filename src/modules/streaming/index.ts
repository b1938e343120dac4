/**
 * Live streams as other features see them: the console's reads and its stop, and what the
 * recorder worker needs to run a stream (its state and transitions, options, the bitrate ladder,
 * destinations, cost, the recorder's room keys) and to cut LL-HLS. Its routes are in
 * ./routes.ts, mounted by the app.
 */
export { stopStream } from "./control";
export { queuedBefore, queuedStreams, queuePlaces } from "./queue";
export {
  getStream,
  LIVE_STATES,
  liveStreams,
  recentStreams,
  recordingObjectKey,
  type Stream,
  streamUrls,
} from "./stream";
export { viewersOf } from "./viewers";
export { stopStateSubscriber, waitForStream } from "./state";
export { formatRoom, parseRoom, recorderPodKey, recorderRoomKey, type Room } from "./recorders";
export { RECONNECT_WINDOW_UNIT_MS, type StreamOptions, wantsRecording } from "./options";
export { BITRATE_LADDER } from "./ladder";
export { openDestinations, sealDestinations } from "./destinations";
export { streamCost } from "./cost";
export { claimStream, finishStream, markQueued, markRunning, takeStream } from "./transitions";
export { Cutter } from "./llhls/cutter";
export { type RenditionInfo, StreamPublisher } from "./llhls/publisher";
export { codecsOf, SKIP_TARGET_DURATIONS } from "./llhls/window";
