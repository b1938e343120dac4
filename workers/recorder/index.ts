import { config } from "../../src/core/config";
import { commandDriver } from "./command";
import type { RecorderDriver } from "./driver";
import { ffmpegDriver } from "./ffmpeg";

/** The one place the recorder driver is chosen. */
export function driverFromConfig(): RecorderDriver {
  return config.streaming.driver === "command" ? commandDriver(config.streaming.command!) : ffmpegDriver;
}
