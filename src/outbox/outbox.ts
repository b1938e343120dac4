/**
 * The process's outbox (core/outbox): rings wait for the database transaction's commit
 * (db/client.ts afterCommit) and cross to other processes over the process's publish/subscribe.
 * It joins the two, so it lives above both: src/queue stays Redis alone and loads no database
 * handle. The composition root (src/process/root.ts) builds it with createProcessOutbox and puts it
 * in place; `outbox` hands each call to that one.
 */
import { installed } from "../core/installed";
import { createOutbox, type Outbox } from "../core/outbox";
import type { PubSub } from "../core/pubsub";
import { afterCommit } from "../db/client";
import { PROMPT_REDIS_MS } from "../queue/connection";

export function createProcessOutbox(bus: PubSub): Outbox {
  return createOutbox({ afterCommit, pubsub: () => bus, publishWithinMs: PROMPT_REDIS_MS });
}

const built = installed<Outbox>("the process's outbox");

export function useOutbox(outbox: Outbox | undefined): void {
  built.install(outbox);
}

export const outbox: Outbox = {
  ring: (tx, consumer, keys) => built().ring(tx, consumer, keys),
  register: (consumer) => built().register(consumer),
};
