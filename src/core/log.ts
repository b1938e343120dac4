/**
 * Logs: JSON lines (pino) for whatever collects them, readable lines when stdout is a
 * terminal. Credentials never reach a log line: see `redact` and the request logger.
 *
 * The readable form is pino-pretty, used as a synchronous stream in this process rather
 * than as a pino transport: a transport is a worker thread per process, and lines it had
 * not written yet are lost when a process dies, which is when they matter most.
 */
import pino from "pino";
import type PinoPretty from "pino-pretty";
import { config } from "./config";

/** A person is reading: stdout is a terminal (the supervisor's children share it). */
export const readableLogs = process.stdout.isTTY === true;

export const log = pino(
  {
    level: config.log.level,
    base: { pid: process.pid },
    redact: {
      paths: ["apiKey", "token", "authorization", "*.apiKey", "*.token", "*.authorization", "*.password"],
      censor: "[redacted]",
    },
  },
  // Loaded only for a terminal: a process whose output is piped (under a service manager, in a
  // container, in the tests) never needs it, and loading it costs a few hundredths of a second.
  readableLogs
    ? (require("pino-pretty") as typeof PinoPretty)({
        colorize: true,
        sync: true,
        singleLine: true,
        translateTime: "SYS:HH:MM:ss.l",
        ignore: "hostname",
      })
    : undefined,
);
