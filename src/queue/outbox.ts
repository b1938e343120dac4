/**
 * The process's outbox (core/outbox): rings wait for the database transaction's commit
 * (db/client.ts afterCommit) and cross to other processes over the process's publish/subscribe.
 */
import { createOutbox } from "../core/outbox";
import { afterCommit } from "../db/client";
import { PROMPT_REDIS_MS } from "./connection";
import { pubsub } from "./redis-pubsub";

export const outbox = createOutbox({ afterCommit, pubsub, publishWithinMs: PROMPT_REDIS_MS });
