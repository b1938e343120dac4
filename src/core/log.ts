/** Structured JSON logs. Credentials never reach a log line: see `redact` and the request logger. */
import pino from "pino";
import { config } from "../config";

export const log = pino({
  level: config.log.level,
  base: { pid: process.pid },
  redact: {
    paths: ["apiKey", "token", "authorization", "*.apiKey", "*.token", "*.authorization", "*.password"],
    censor: "[redacted]",
  },
});
