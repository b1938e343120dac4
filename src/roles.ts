/**
 * The kinds of process Parley runs. The supervisor starts each as a child process
 * (`bun src/index.ts --role=<name>`), or all inside itself on the embedded database.
 */
import type { Running } from "./server";

export const ROLES = {
  api: async (): Promise<Running> => (await import("./server")).startApiServer(),
  recorder: async (): Promise<Running> => (await import("../workers/recorder")).startRecorderWorker(),
  sip: async (): Promise<Running> => (await import("../sip-gateway/index")).startSipRole(),
  cdr: async (): Promise<Running> => (await import("../workers/cdr")).startCdrWorker(),
} as const;

export type Role = keyof typeof ROLES;

export function isRole(name: string): name is Role {
  return Object.hasOwn(ROLES, name);
}
