/**
 * The roles Parley runs. The supervisor starts the API's as child processes (`bun src/index.ts --role=api`)
 * and the others together in one more (`--role=recorder,sip,cdr,webhooks`) or each in its own
 * (WORKER_PROCESSES=per-role), or all inside itself on the embedded database. Each is started with the
 * services its process's root built (root.ts).
 */
import { config } from "../core/config";
import type { Running } from "../core/lifecycle";
import type { ProcessServices } from "./root";

export const ROLES = {
  api: async (services: ProcessServices): Promise<Running> => (await import("./server")).startApiServer(services),
  recorder: async (services: ProcessServices): Promise<Running> =>
    (await import("../../workers/recorder")).startRecorderWorker(undefined, services),
  sip: async (): Promise<Running> => (await import("../../sip-gateway/role")).startSipGateway(),
  cdr: async ({ outbox }: ProcessServices): Promise<Running> =>
    (await import("../../workers/cdr")).startCdrWorker({ outbox }),
  webhooks: async ({ outbox }: ProcessServices): Promise<Running> =>
    (await import("../modules/webhooks/worker")).startWebhooksWorker({ outbox }),
} as const;

export type Role = keyof typeof ROLES;

/** The argument by which the supervisor names itself to the role processes it starts. */
export const SUPERVISOR_FLAG = "--supervisor-pid";

/** The argument of the short process in which a supervisor on PostgreSQL prepares the database (children.ts). */
export const PREPARE_FLAG = "--prepare";

/**
 * Whether this deployment runs the role. A disabled role is not started at all: a process
 * with nothing to do would exit and be restarted by the supervisor forever.
 */
export function isRoleEnabled(role: Role): boolean {
  return role !== "sip" || config.sip.enabled;
}

export function isRole(name: string): name is Role {
  return Object.hasOwn(ROLES, name);
}
