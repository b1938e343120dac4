/**
 * The process's outbox (core/outbox): rings wait for the database transaction's commit
 * (db/client.ts afterCommit) and cross to other processes over the process's publish/subscribe
 * (queue/redis-pubsub.ts). It joins the two, so it lives above both: src/queue stays Redis alone
 * and loads no database handle.
 */
import { createOutbox } from "../core/outbox";
import { afterCommit } from "../db/client";
import { PROMPT_REDIS_MS } from "../queue/connection";
import { pubsub } from "../queue/redis-pubsub";

export const outbox = createOutbox({ afterCommit, pubsub, publishWithinMs: PROMPT_REDIS_MS });
