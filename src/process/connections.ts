/** The connections every role of a process shares, closed once its roles have stopped. */
import { database } from "../db/client";
import { whenStopping } from "../core/lifecycle";
import { log } from "../core/log";
import { abandonLostConnections, closeRedis } from "../queue/connection";
import { closeQueues } from "../queue/queues";

export async function closeShared(): Promise<void> {
  await closeQueues();
  await closeRedis();
  await database.close();
}

// Nothing of a stop may wait for a Redis that is gone: commands queued on a lost connection fail at once.
whenStopping(() => {
  const abandoned = abandonLostConnections();
  if (abandoned > 0) log.warn({ connections: abandoned }, "Redis is unreachable: stopping without it");
});
