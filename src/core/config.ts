/**
 * Every setting Parley reads from the environment, parsed and typed in one place; longer
 * than most files on purpose, since docs/configuration.md is checked against this one table.
 * Wrong values stop start-up with a message for each variable that is wrong.
 */
import { cpus, hostname } from "node:os";
import { resolve } from "node:path";
import { ConfigError, type Env, EnvReader } from "./env-reader";

export { ConfigError };

const withoutTrailingSlash = (value: string) => value.replace(/\/+$/, "");

export const SIGNING_ALGORITHMS = ["RS256", "ES256", "EdDSA"] as const;
export type SigningAlgorithm = (typeof SIGNING_ALGORITHMS)[number];

export const RECORDER_DRIVERS = ["ffmpeg", "command"] as const;
export const X264_PRESETS = ["ultrafast", "superfast", "veryfast", "faster", "fast", "medium"] as const;

function streamingConfig(read: EnvReader, publicUrl: string, dataDir: string) {
  const driver = read.oneOf("STREAMING_RECORDER_DRIVER", "ffmpeg", RECORDER_DRIVERS);
  const command = read.optionalText("STREAMING_RECORDER_COMMAND");
  if (driver === "command" && command === undefined) {
    read.problem("STREAMING_RECORDER_COMMAND must be set when STREAMING_RECORDER_DRIVER is command", undefined);
  }
  const base = (name: string, fallback: string, protocols: string[]) =>
    withoutTrailingSlash(read.url(name, fallback, protocols));
  return {
    /** Where the recorder publishes the stream: the media server's RTMP application. */
    rtmpIngestUrl: base("STREAMING_RTMP_INGEST_URL", "rtmp://127.0.0.1:1935/live", ["rtmp:", "rtmps:"]),
    /** Public bases the stream URLs in responses are built from. */
    hlsBaseUrl: base("STREAMING_HLS_BASE_URL", "http://localhost:8080/hls", ["http:", "https:"]),
    /** Parley serves LL-HLS itself, under /llhls/v1/live; a CDN in front of it gets its own base here. */
    llhlsBaseUrl: base("STREAMING_LLHLS_BASE_URL", `${withoutTrailingSlash(publicUrl)}/llhls/v1/live`, [
      "http:",
      "https:",
    ]),
    /** LL-HLS part target (PART-TARGET), in ms; parts are whole frames up to it. Fixed for a stream's life. */
    llhlsPartMs: read.integer("STREAMING_LLHLS_PART_MS", 333, 100, 1000),
    /** LL-HLS segment duration in ms: low-latency streams get a keyframe this often, and a segment starts on each. */
    llhlsSegmentMs: read.integer("STREAMING_LLHLS_SEGMENT_MS", 2000, 1000, 6000),
    /**
     * How often low-latency streams get a keyframe within a segment, in ms, rounded to whole parts (at most the
     * segment): each part that starts on one is independent, a point a player can start from. One a segment by
     * default: see docs/streaming.md (independent parts) for what more of them changed.
     */
    llhlsKeyframeMs: read.integer("STREAMING_LLHLS_KEYFRAME_MS", 2000, 100, 6000),
    rtmpBaseUrl: base("STREAMING_RTMP_BASE_URL", "rtmp://localhost:1935/live", ["rtmp:", "rtmps:"]),
    flvBaseUrl: base("STREAMING_FLV_BASE_URL", "http://localhost:8080/live", ["http:", "https:"]),
    vodBaseUrl: base("STREAMING_VOD_BASE_URL", `${withoutTrailingSlash(publicUrl)}/vod/v1`, ["http:", "https:"]),
    /** The room's media, `{room}` replaced by the room name; unset means a generated test pattern with a tone. */
    mediaSource: read.optionalText("STREAMING_MEDIA_SOURCE"),
    driver,
    command,
    ffmpegPath: read.text("STREAMING_FFMPEG_PATH", "ffmpeg"),
    x264Preset: read.oneOf("STREAMING_X264_PRESET", "veryfast", X264_PRESETS),
    /** Streams one recorder worker runs at once; start jobs beyond it wait for another worker. */
    capacity: read.integer("STREAMING_CAPACITY", 4, 1, 1000),
    /**
     * What one recorder worker may run at once in cost units (src/modules/streaming/cost.ts), a
     * hundredth of a core each: 100 per core by default. A start is taken only when both this
     * and STREAMING_CAPACITY leave room.
     */
    /** Streams waiting for a recorder worker at once, all accounts together; a start past it is a 429. */
    queueMax: read.integer("STREAMING_QUEUE_MAX", 1000, 1, 1_000_000),
    workerUnits: read.integer("STREAMING_WORKER_UNITS", 100 * cpus().length, 1, 1_000_000),
    /** Names this recorder worker in responses (pod_name) and in Redis; unique per worker process. */
    podName: read.text("STREAMING_POD_NAME", `${hostname()}-recorder-${process.pid}`),
    /** Host patterns (`live.example.com`, `*.example.com`) that stream_urls may point at; empty refuses them all. */
    destinationHosts: read.list("STREAMING_DESTINATION_HOSTS", ""),
    /** When set, media-server callbacks must carry it (`?secret=` or X-Parley-Callback-Secret). */
    callbackSecret: read.optionalText("STREAMING_CALLBACK_SECRET"),
    /** Peer addresses allowed to send media-server callbacks; empty skips the address check. */
    callbackAddresses: read.list("STREAMING_CALLBACK_ADDRESSES", "127.0.0.1,::1,::ffff:127.0.0.1"),
    /** Local folder the recorder writes MP4 files to before uploading them. */
    recordingDir: resolve(read.text("STREAMING_RECORDING_DIR", resolve(dataDir, "recordings"))),
    /** How long start and stop wait for the recorder (the spec's 30 seconds). */
    operationTimeoutMs: read.integer("STREAMING_OPERATION_TIMEOUT_MS", 30_000, 1_000, 300_000),
    /** How long a stopping recorder may take to finish its files before it is killed. */
    stopGraceMs: read.integer("STREAMING_STOP_GRACE_MS", 10_000, 100, 120_000),
    /**
     * A recorder worker silent this long is taken for lost and its streams fail (recorder_lost).
     * Workers beat every 3/10 of it and reconcile every whole of it.
     */
    lostAfterMs: read.integer("STREAMING_RECORDER_LOST_MS", 10_000, 1_000, 600_000),
  };
}

/**
 * DATABASE_URL may name several hosts, as libpq's do (`postgres://u@db1:5432,db2:5432/parley`):
 * Parley then connects only to the one that accepts writes (see src/db/client.ts). Each host
 * is checked as a URL of its own would be.
 */
function databaseUrl(read: EnvReader): string | undefined {
  const protocols = ["postgres:", "postgresql:"];
  const raw = read.optionalText("DATABASE_URL");
  const hosts = raw === undefined ? undefined : /^[^:/?#]+:\/\/(?:[^@/?#]*@)?([^/?#]*)/.exec(raw)?.[1];
  if (raw === undefined || hosts === undefined || !hosts.includes(","))
    return read.url("DATABASE_URL", undefined, protocols);
  for (const host of hosts.split(",")) {
    const single = new EnvReader({ DATABASE_URL: raw.replace(hosts, host) });
    single.url("DATABASE_URL", undefined, protocols);
    if (host === "" || single.problems.length > 0)
      return read.problem(`DATABASE_URL must be a URL, each of its hosts too, got "${raw}"`, undefined);
  }
  return raw;
}

/** A comma-separated list of host:port (an IPv6 host in brackets). */
function hostPorts(read: EnvReader, name: string): { host: string; port: number }[] {
  return read.list(name, "").map((entry) => {
    const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^:\s]+)):(\d{1,5})$/.exec(entry);
    const port = Number(match?.[3]);
    if (!match || port < 1 || port > 65535) {
      return read.problem(`${name} must be a comma-separated list of host:port, got "${entry}"`, {
        host: "",
        port: 0,
      });
    }
    return { host: (match[1] ?? match[2])!, port };
  });
}

/**
 * Where Redis is: one server (REDIS_URL), the master Sentinel names (REDIS_SENTINELS), found again after a
 * failover, or a Redis Cluster (REDIS_CLUSTER_NODES).
 */
function redisConfig(read: EnvReader) {
  const sentinels = hostPorts(read, "REDIS_SENTINELS");
  const clusterNodes = hostPorts(read, "REDIS_CLUSTER_NODES");
  if (clusterNodes.length > 0 && sentinels.length > 0)
    read.problem("REDIS_CLUSTER_NODES and REDIS_SENTINELS name two ways to reach Redis: give one", undefined);
  return {
    /**
     * With sentinels, only its credentials, database number and scheme
     * (rediss: for TLS) are used: the master's address comes from Sentinel.
     * An absolute path is a Unix socket's (`/run/redis.sock?db=2`), as ioredis reads it.
     */
    url: read.optionalText("REDIS_URL")?.startsWith("/")
      ? read.text("REDIS_URL", "")
      : read.url("REDIS_URL", "redis://127.0.0.1:6379", ["redis:", "rediss:"])!,
    sentinels,
    /**
     * Seed nodes of a Redis Cluster: any few of its primaries or replicas; the client learns
     * the rest, and which node holds which slot, from them. With these, REDIS_URL gives only
     * its credentials and scheme.
     */
    clusterNodes,
    /** The master group Sentinel watches (`sentinel monitor <name> ...`). */
    sentinelName: read.text("REDIS_SENTINEL_NAME", "mymaster"),
    /**
     * False when none of REDIS_URL, REDIS_SENTINELS and REDIS_CLUSTER_NODES was given:
     * the start command may then run a private redis-server.
     */
    explicit: read.optionalText("REDIS_URL") !== undefined || sentinels.length > 0 || clusterNodes.length > 0,
    keyPrefix: read.text("REDIS_PREFIX", "parley"),
  };
}

/** Every setting from `env`, or a ConfigError naming every bad variable. Reads nothing else and changes nothing. */
/**
 * What a presigned upload may be: files a chat shows or offers for download. Never a type a
 * browser runs when the bucket is served from a web origin (a page, an image with scripts, a
 * script): that would be stored XSS, so listing one is a configuration error.
 */
const UPLOAD_CONTENT_TYPES =
  "image/png,image/jpeg,image/gif,image/webp,image/avif,application/pdf,text/plain," +
  "audio/mpeg,audio/ogg,audio/wav,audio/webm,audio/mp4,video/mp4,video/webm,video/ogg,video/quicktime," +
  "application/octet-stream";
const ACTIVE_CONTENT = new RegExp(
  "^(text/html|text/xml|application/xml|text/xsl|[^/]+/[^/]*\\+xml|[^/]+/(x-)?(java|ecma)script|" +
    "text/x-component|multipart/x-mixed-replace)$",
);

function uploadContentTypes(read: EnvReader): string[] {
  const types = read.list("UPLOAD_CONTENT_TYPES", UPLOAD_CONTENT_TYPES).map((type) => type.toLowerCase());
  const active = types.find((type) => ACTIVE_CONTENT.test(type));
  if (active === undefined) return types;
  return read.problem(
    `UPLOAD_CONTENT_TYPES must not list ${active}: a browser runs it as a page or script wherever the bucket is served`,
    UPLOAD_CONTENT_TYPES.split(","),
  );
}

export function loadConfig(env: Env) {
  const read = new EnvReader(env);
  const port = read.integer("PORT", 3000, 0, 65535);
  const publicUrl = read.url("PUBLIC_URL", `http://localhost:${port}`, ["http:", "https:"]);
  const dataDir = resolve(read.text("DATA_DIR", "./data"));
  const loaded = {
    http: {
      /** Loopback until told otherwise: a first `npm start` serves this machine only (docs/configuration.md). */
      host: read.text("HOST", "127.0.0.1"),
      port,
      /** API processes the supervisor starts; each listens on PORT with reusePort. */
      processes: read.integer("API_PROCESSES", cpus().length, 1, 256),
      /** How long in-flight requests may take to finish after SIGTERM. */
      shutdownGraceMs: read.integer("SHUTDOWN_GRACE_MS", 10_000, 0, 600_000),
      maxBodyBytes: read.integer("MAX_BODY_BYTES", 1_048_576, 1024, 1_073_741_824),
      publicUrl,
    },
    workers: {
      /**
       * How the supervisor runs the worker roles on PostgreSQL: together in one child process (`shared`: some
       * 55 MB of Bun's own per process less for each role), or each in its own (`per-role`: one role's crash
       * does not restart the others).
       */
      processes: read.oneOf("WORKER_PROCESSES", "shared", ["shared", "per-role"] as const),
    },
    /**
     * Prometheus metrics on a listener of their own, off the public port: every API process
     * listens there with reusePort, and each answers for the whole pool. 0 turns it off.
     */
    metrics: {
      host: read.text("METRICS_HOST", "127.0.0.1"),
      port: read.integer("METRICS_PORT", 9464, 0, 65535),
    },
    database: {
      /** When unset, Parley runs on an embedded PGlite database in DATA_DIR. */
      url: databaseUrl(read),
      dataDir,
      poolSize: read.integer("DATABASE_POOL_SIZE", 10, 1, 1000),
      /** A pooled connection idle this long is closed (0: never), so quiet processes give their server slots back. */
      idleSeconds: read.integer("DATABASE_IDLE_SECONDS", 300, 0, 86_400),
      /**
       * The embedded database's page cache, in MB. PostgreSQL's 128 MB default is all resident in
       * PGlite (its memory is zeroed at start), most of an idle embedded Parley; a page read past this
       * cache comes from the operating system's, whose copy costs far less than the 112 MB.
       */
      embeddedSharedBuffersMb: read.integer("PGLITE_SHARED_BUFFERS_MB", 16, 1, 1024),
    },
    redis: redisConfig(read),
    log: {
      level: read.oneOf("LOG_LEVEL", "info", ["trace", "debug", "info", "warn", "error", "fatal", "silent"] as const),
    },
    tokens: {
      /** Algorithm of the signing key made for a new account. */
      defaultAlgorithm: read.oneOf("TOKEN_DEFAULT_ALG", "RS256", SIGNING_ALGORITHMS),
      /** Lifetime when a token request gives no exp, in seconds (24 hours). */
      defaultTtlSeconds: read.integer("TOKEN_DEFAULT_TTL_SECONDS", 86_400, 60, 31_536_000),
      /** Longest exp a request may ask for, in seconds (30 days). */
      maxTtlSeconds: read.integer("TOKEN_MAX_TTL_SECONDS", 2_592_000, 60, 31_536_000),
      issuer: "parley",
      /** Seals private signing keys in the database (AES-256-GCM); unset stores them as plain JWKs. */
      signingKeySecret: read.optionalText("SIGNING_KEY_SECRET"),
    },
    storage: {
      /** S3-compatible endpoint; unset means AWS S3 itself. */
      endpoint: read.url("S3_ENDPOINT", undefined, ["http:", "https:"]),
      region: read.text("S3_REGION", "us-east-1"),
      /** Unset turns off uploads and recordings (their routes answer 503). */
      bucket: read.optionalText("S3_BUCKET"),
      accessKeyId: read.optionalText("S3_ACCESS_KEY_ID"),
      secretAccessKey: read.optionalText("S3_SECRET_ACCESS_KEY"),
      /** Path-style URLs (endpoint/bucket/key), which MinIO and s3rver need. */
      forcePathStyle: read.boolean("S3_FORCE_PATH_STYLE", false),
      /** How long a presigned upload URL stays valid, in seconds. */
      presignExpirySeconds: read.integer("S3_PRESIGN_EXPIRY_SECONDS", 900, 1, 604_800),
      /** The content types a presigned upload may carry. */
      uploadContentTypes: uploadContentTypes(read),
      /** The largest presigned upload, in bytes: 25 MiB unless set (a single PUT takes at most 5 GiB). */
      uploadMaxBytes: read.integer("UPLOAD_MAX_BYTES", 26_214_400, 1, 5_368_709_120),
    },
    sip: {
      /** Off: the supervisor runs no sip role, for deployments without phone access. */
      enabled: read.boolean("SIP_ENABLED", true),
      /** Loopback until told otherwise, as HOST. */
      bindAddress: read.text("SIP_BIND_ADDRESS", "127.0.0.1"),
      /** Address written into Via, Contact and the SDP answer; the bind address unless that is a wildcard. */
      publicAddress: read.optionalText("SIP_PUBLIC_ADDRESS"),
      /** 0 turns that transport off. */
      udpPort: read.integer("SIP_UDP_PORT", 5060, 0, 65535),
      tcpPort: read.integer("SIP_TCP_PORT", 5060, 0, 65535),
      /** SIP over TLS (0, the default, is off): needs a certificate and its key, PEM files. */
      tls: {
        port: read.integer("SIP_TLS_PORT", 0, 0, 65535),
        certPath: read.optionalText("SIP_TLS_CERT"),
        keyPath: read.optionalText("SIP_TLS_KEY"),
      },
      /** First and last RTP port of the media sockets; 0 and 0 lets the system choose. */
      rtpPortMin: read.integer("SIP_RTP_PORT_MIN", 0, 0, 65535),
      rtpPortMax: read.integer("SIP_RTP_PORT_MAX", 0, 0, 65535),
      /** Header naming the room; Jigasi's Jitsi-Conference-Room is always read too. */
      roomHeader: read.headerName("SIP_ROOM_HEADER", "Parley-Conference-Room"),
      /** The account that owns calls into a named room (header or default room); numeric ids carry their own. */
      accountId: read.optionalText("SIP_ACCOUNT_ID"),
      defaultRoom: read.optionalText("SIP_DEFAULT_ROOM"),
      /** How long a call rings (180 Ringing) before the gateway answers; 0 answers at once. */
      ringMs: read.integer("SIP_RING_MS", 0, 0, 60_000),
      /** Wrong conference ids a DTMF caller may enter before the call ends. */
      dtmfAttempts: read.integer("SIP_DTMF_ATTEMPTS", 3, 1, 20),
      /** How long a DTMF caller has to finish one id with #. */
      dtmfTimeoutMs: read.integer("SIP_DTMF_TIMEOUT_MS", 30_000, 1_000, 600_000),
      /** RFC 3261 timer L, 64 × T1: an answered call with no ACK by then is ended with a BYE. */
      ackTimeoutMs: read.integer("SIP_ACK_TIMEOUT_MS", 32_000, 500, 600_000),
      /** Longest call; the gateway hangs up after it (4 hours). */
      maxCallSeconds: read.integer("SIP_MAX_CALL_SECONDS", 14_400, 1, 604_800),
      maxCalls: read.integer("SIP_MAX_CALLS", 1_000, 1, 100_000),
      /** Calls at once from one source address, so that one caller cannot take every call; 0 turns it off. */
      maxCallsPerSource: read.integer("SIP_MAX_CALLS_PER_SOURCE", 250, 0, 100_000),
      /** Larger datagrams or TCP messages are refused (513 when they can be answered). */
      maxMessageBytes: read.integer("SIP_MAX_MESSAGE_BYTES", 16_384, 1_024, 65_507),
      /** Requests per second one source address may send before the excess is dropped; 0 turns the limit off. */
      requestsPerSecond: read.integer("SIP_REQUESTS_PER_SECOND", 200, 0, 1_000_000),
      maxTcpConnections: read.integer("SIP_MAX_TCP_CONNECTIONS", 1_000, 1, 100_000),
      /** Sources allowed to send INVITEs (addresses or CIDR ranges); empty allows every source. */
      allowedSources: read.cidrList("SIP_ALLOWED_SOURCES"),
      /** Where the shipped conference adapter POSTs each join and leave; unset only records them. */
      joinUrl: read.url("SIP_JOIN_URL", undefined, ["http:", "https:"]),
      /** The conference's SIP media endpoints (Jigasi, say): set, the gateway bridges each call to one as a B2BUA. */
      media: {
        uris: read.sipUriList("SIP_MEDIA_URI"),
        selection: read.oneOf("SIP_MEDIA_SELECTION", "failover", ["failover", "round-robin"] as const),
        roomHeader: read.headerName("SIP_MEDIA_ROOM_HEADER", "Jitsi-Conference-Room"),
        /** Written after bare room names in the room header (room@domain), as Jigasi expects. */
        conferenceDomain: read.optionalText("SIP_MEDIA_CONFERENCE_DOMAIN"),
        /** Off passes SDP end to end (audio flows caller to endpoint directly) when the call allows it. */
        relay: read.boolean("SIP_MEDIA_RELAY", true),
        /** An endpoint silent this long (not even 100 Trying) is skipped for the next. */
        responseTimeoutMs: read.integer("SIP_MEDIA_RESPONSE_TIMEOUT_MS", 2_000, 100, 60_000),
        /** An endpoint that has not answered by then is cancelled (and the next tried). */
        answerTimeoutMs: read.integer("SIP_MEDIA_ANSWER_TIMEOUT_MS", 30_000, 500, 300_000),
      },
      joinTimeoutMs: read.integer("SIP_JOIN_TIMEOUT_MS", 5_000, 100, 60_000),
      /**
       * A gateway whose heartbeat is silent this long is lost; another gateway ends its open calls
       * at its last beat. Gateways beat every third of it and look every 5/6 of it.
       */
      lostAfterMs: read.integer("SIP_GATEWAY_LOST_MS", 6_000, 600, 600_000),
      trunk: {
        /** Registrar of an upstream trunk; unset means the gateway registers nowhere. */
        registrar: read.sipUri("SIP_TRUNK_REGISTRAR"),
        /** Address of record to register, e.g. sip:4815162342@trunk.example.com. */
        aor: read.sipUri("SIP_TRUNK_AOR"),
        username: read.optionalText("SIP_TRUNK_USERNAME"),
        password: read.optionalText("SIP_TRUNK_PASSWORD"),
        transport: read.oneOf("SIP_TRUNK_TRANSPORT", "udp", ["udp", "tcp", "tls"] as const),
        expiresSeconds: read.integer("SIP_TRUNK_EXPIRES_SECONDS", 600, 60, 86_400),
      },
    },
    mapper: {
      /** Digits of a new conference id, the check digit included (9 = 8 random digits + 1). */
      idDigits: read.integer("MAPPER_ID_DIGITS", 9, 6, 10),
    },
    scheduler: {
      /** Length of a conference that Prosody opens with no reservation, in minutes (24 hours). */
      defaultConferenceMinutes: read.integer("SCHEDULER_DEFAULT_CONFERENCE_MINUTES", 1440, 1, 525_600),
      /**
       * Only the reservation's mail_owner may open a reserved room (compared with the bare JID
       * Prosody sends). Off by default: with anonymous or token logins that JID is random.
       */
      checkOwner: read.boolean("SCHEDULER_CHECK_OWNER", false),
    },
    streaming: streamingConfig(read, publicUrl, dataDir),
    realtime: {
      /**
       * How sockets on different API processes reach each other: `redis` (pub/sub, for
       * several processes) or `local` (in-process, one process). `auto` picks local on the
       * embedded database or with API_PROCESSES=1, where there is one API process, and
       * redis otherwise.
       */
      broker: read.oneOf("REALTIME_BROKER", "auto", ["auto", "redis", "local"] as const),
      /** A socket that sends nothing (not even a heartbeat) for this long is closed. */
      idleTimeoutSeconds: read.integer("REALTIME_IDLE_TIMEOUT_SECONDS", 60, 1, 3600),
      /** Largest frame a client may send; a larger one closes the socket with 1009. */
      maxFrameBytes: read.integer("REALTIME_MAX_FRAME_BYTES", 65_536, 1024, 16_777_216),
    },
    usage: {
      /** Rung rooms one cdr worker process folds at once; each fold takes per-room locks, so more is safe. */
      workerConcurrency: read.integer("CDR_WORKER_CONCURRENCY", 4, 1, 256),
      /** How often each cdr process folds events whose ring was lost (e.g. with Redis); at most a minute. */
      sweepIntervalMs: read.integer("USAGE_SWEEP_INTERVAL_MS", 30_000, 100, 60_000),
      /** The sweep leaves events younger than this to their ring's fold. */
      sweepMinAgeMs: read.integer("USAGE_SWEEP_MIN_AGE_MS", 10_000, 0, 600_000),
    },
    limits: {
      /** Requests per second one client address may send to the routes without a credential; 0 turns it off. */
      publicPerIpPerSecond: read.integer("LIMIT_PUBLIC_PER_IP", 300, 0, 1_000_000),
      /**
       * What requests hold open, counted in each API process (docs/limits.md#caps): beyond a
       * caller's cap 429, beyond the process's 503, both with Retry-After.
       */
      held: {
        /** LL-HLS requests that may wait (blocking reloads, parts) one client address holds; 0 turns it off. */
        llhlsWaitsPerAddress: read.integer("LIMIT_LLHLS_WAITS_PER_ADDRESS", 64, 0, 1_000_000),
        llhlsWaitsPerStream: read.integer("LIMIT_LLHLS_WAITS_PER_STREAM", 2_000, 1, 1_000_000),
        llhlsWaitsPerProcess: read.integer("LIMIT_LLHLS_WAITS_PER_PROCESS", 3_000, 1, 1_000_000),
        eventStreamsPerKey: read.integer("LIMIT_EVENT_STREAMS_PER_KEY", 10, 1, 1_000_000),
        eventStreamsPerAccount: read.integer("LIMIT_EVENT_STREAMS_PER_ACCOUNT", 50, 1, 1_000_000),
        eventStreamsPerProcess: read.integer("LIMIT_EVENT_STREAMS_PER_PROCESS", 500, 1, 1_000_000),
        socketsPerToken: read.integer("LIMIT_SOCKETS_PER_TOKEN", 20, 1, 1_000_000),
        socketsPerUser: read.integer("LIMIT_SOCKETS_PER_USER", 50, 1, 1_000_000),
        /** Half the process's sockets: an account minting tokens for many users leaves room for the others. */
        socketsPerAccount: read.integer("LIMIT_SOCKETS_PER_ACCOUNT", 5_000, 1, 1_000_000),
        socketsPerProcess: read.integer("LIMIT_SOCKETS_PER_PROCESS", 10_000, 1, 1_000_000),
        topicsPerSocket: read.integer("LIMIT_TOPICS_PER_SOCKET", 100, 1, 100_000),
        /** startRecording and stopRecording requests of one account waiting for the recorder at once. */
        streamingWaitsPerAccount: read.integer("LIMIT_STREAMING_WAITS_PER_ACCOUNT", 100, 1, 1_000_000),
        streamingWaitsPerProcess: read.integer("LIMIT_STREAMING_WAITS_PER_PROCESS", 500, 1, 1_000_000),
        /** Console live feeds (one per open console page) one console session holds. */
        consoleFeedsPerSession: read.integer("LIMIT_CONSOLE_FEEDS_PER_SESSION", 8, 1, 1_000_000),
        consoleFeedsPerProcess: read.integer("LIMIT_CONSOLE_FEEDS_PER_PROCESS", 100, 1, 1_000_000),
      },
    },
    console: {
      /** Signs console sessions; unset means a secret generated once into DATA_DIR/console-secret. */
      secret: read.optionalText("CONSOLE_SECRET"),
      /** Lifetime of a console session's cookie token; it is renewed while the console is in use. */
      tokenTtlSeconds: read.integer("CONSOLE_TOKEN_TTL_SECONDS", 900, 60, 86_400),
      /** Longest a console session lasts, however busy, before its user signs in again (12 hours). */
      sessionMaxSeconds: read.integer("CONSOLE_SESSION_MAX_SECONDS", 43_200, 300, 2_592_000),
      /**
       * Failed sign-ins one address may make for one name in 15
       * minutes before 429; four times as many across all names.
       */
      loginAttempts: read.integer("CONSOLE_LOGIN_ATTEMPTS", 5, 1, 1000),
      /**
       * Memory (KiB) of the argon2id hash of an operator's password, Bun's default of 64 MiB:
       * each sign-in holds that much for its hash, so a small machine may want less.
       */
      passwordMemoryKib: read.integer("OPERATOR_PASSWORD_MEMORY_KIB", 65_536, 1024, 4_194_304),
    },
    webhooks: {
      /**
       * Lets endpoints on loopback and private networks receive
       * webhooks; link-local and metadata addresses stay refused.
       */
      allowPrivateNetworks: read.boolean("WEBHOOK_ALLOW_PRIVATE_NETWORKS", false),
      /**
       * Seconds to wait after each failed attempt; when they are
       * used up the delivery has failed (about 28 hours by default).
       */
      retrySchedule: read.secondsList("WEBHOOK_RETRY_SCHEDULE", "5,300,1800,7200,18000,36000,36000"),
      /** How long a receiver has to answer one attempt. */
      timeoutMs: read.integer("WEBHOOK_TIMEOUT_MS", 10_000, 100, 120_000),
      /**
       * How long a new connection (TLS handshake included) may take, within WEBHOOK_TIMEOUT_MS: a receiver that
       * cannot be reached gives up its slot sooner than one that is slow to answer.
       */
      connectTimeoutMs: read.integer("WEBHOOK_CONNECT_TIMEOUT_MS", 3_000, 100, 120_000),
      /**
       * An endpoint's circuit breaker opens when, of at least breakerMinAttempts attempts within breakerWindowSeconds
       * of a failure, this percentage or more failed; open, its deliveries wait, unattempted, breakerCooldownSeconds
       * (and until the next sweep) before one probe.
       */
      breakerFailurePercent: read.integer("WEBHOOK_BREAKER_FAILURE_PERCENT", 50, 1, 100),
      breakerWindowSeconds: read.integer("WEBHOOK_BREAKER_WINDOW_SECONDS", 60, 1, 86_400),
      breakerMinAttempts: read.integer("WEBHOOK_BREAKER_MIN_ATTEMPTS", 10, 1, 100_000),
      breakerCooldownSeconds: read.integer("WEBHOOK_BREAKER_COOLDOWN_SECONDS", 30, 1, 86_400),
      /** An endpoint whose attempts all failed for this long is disabled (24 hours). */
      disableAfterSeconds: read.integer("WEBHOOK_DISABLE_AFTER_SECONDS", 86_400, 1, 31_536_000),
      /** Deliveries one webhooks worker process sends at once. */
      workerConcurrency: read.integer("WEBHOOK_WORKER_CONCURRENCY", 16, 1, 1024),
      /** How often each webhooks process queues the due deliveries a lost job left (the database is the truth). */
      sweepIntervalMs: read.integer("WEBHOOK_SWEEP_INTERVAL_MS", 5_000, 100, 60_000),
      /** Days events stay readable in the event log; older ones are purged. */
      eventRetentionDays: read.integer("EVENT_RETENTION_DAYS", 30, 1, 3650),
    },
    admin: {
      /** On first start with no account at all, make one and print its API key. */
      bootstrapAccount: read.boolean("BOOTSTRAP_ACCOUNT", true),
    },
  };
  const { sip } = loaded;
  const check = (wrong: unknown, message: string) => {
    if (wrong) read.problem(message, undefined);
  };
  check(
    sip.enabled && sip.udpPort === 0 && sip.tcpPort === 0 && sip.tls.port === 0,
    "SIP_UDP_PORT, SIP_TCP_PORT and SIP_TLS_PORT are all 0: set SIP_ENABLED=false to run no gateway",
  );
  check(sip.defaultRoom && !sip.accountId, "SIP_DEFAULT_ROOM needs SIP_ACCOUNT_ID, the account whose room it is");
  check(
    sip.tls.port !== 0 && (!sip.tls.certPath || !sip.tls.keyPath),
    "SIP_TLS_PORT needs SIP_TLS_CERT and SIP_TLS_KEY",
  );
  check(
    sip.media.uris.length > 0 && sip.joinUrl,
    "SIP_MEDIA_URI and SIP_JOIN_URL are two ways to reach the conference: set one",
  );
  check(
    sip.rtpPortMin > sip.rtpPortMax,
    `SIP_RTP_PORT_MIN must not exceed SIP_RTP_PORT_MAX (${sip.rtpPortMin} > ${sip.rtpPortMax})`,
  );
  check(
    sip.trunk.registrar && (!sip.trunk.aor || !sip.trunk.username || !sip.trunk.password),
    "SIP_TRUNK_REGISTRAR needs SIP_TRUNK_AOR, SIP_TRUNK_USERNAME and SIP_TRUNK_PASSWORD",
  );
  if (read.problems.length > 0) throw new ConfigError(read.problems);
  return deepFreeze(loaded);
}

export type Config = ReturnType<typeof loadConfig>;
export type SipConfig = Config["sip"];

/** Settings are parsed once and never edited in place: a change is a new settings object (see overrideConfig). */
function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const inner of Object.values(value)) deepFreeze(inner);
  }
  return value;
}

let current: Config | undefined;

/** The settings in force, parsed from process.env at the first read unless an entry point parsed them first. */
function settings(): Config {
  current ??= loadConfig(process.env);
  return current;
}

/**
 * The one way to read a setting: `config.<section>.<name>` always reads the settings in force.
 * A module that keeps a section (`const s = config.streaming`) keeps what was in force then.
 */
export const config: Config = new Proxy({} as Config, {
  get: (_target, section) => Reflect.get(settings(), section),
  has: (_target, section) => Reflect.has(settings(), section),
  ownKeys: () => Reflect.ownKeys(settings()),
  getOwnPropertyDescriptor: (_target, section) => {
    const descriptor = Reflect.getOwnPropertyDescriptor(settings(), section);
    return descriptor && { ...descriptor, configurable: true };
  },
});

/**
 * Parses process.env into the settings in force, for an entry point to call before anything
 * reads them. False, once every bad variable is printed, when the environment is wrong: the
 * entry point then exits.
 */
export function loadProcessConfig(): boolean {
  try {
    current = loadConfig(process.env);
    return true;
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    for (const problem of error.problems) console.error(`parley: configuration error: ${problem}`);
    return false;
  }
}

type Overrides<T> = {
  [K in keyof T]?: T[K] extends readonly unknown[] ? T[K] : T[K] extends object ? Overrides<T[K]> : T[K];
};

function merged(base: object, overrides: object): object {
  const result: Record<string, unknown> = { ...base };
  for (const [key, value] of Object.entries(overrides)) {
    const inner = result[key];
    const nested =
      typeof value === "object" &&
      value !== null &&
      !Array.isArray(value) &&
      typeof inner === "object" &&
      inner !== null;
    result[key] = nested ? merged(inner, value) : value;
  }
  return result;
}

/**
 * Puts settings that differ from the environment's in force, for a test or an embedding
 * program; nested sections merge, lists are replaced. The returned function restores the
 * settings that were in force before.
 */
export function overrideConfig(overrides: Overrides<Config>): () => void {
  const before = settings();
  current = deepFreeze(merged(before, overrides) as Config);
  return () => {
    current = before;
  };
}
