/** Two messaging users of a fresh account, Alice and Bob, and chat rooms Alice made, for the socket tests. */
import { verifyAccessToken } from "../../src/modules/auth/access-token";
import { createRoom } from "../../src/modules/chat/rooms";
import { actorFrom } from "../../src/modules/auth/actor";
import { newAccount, tokenFor } from "../helpers";

export async function aliceAndBob(rooms: string[] = []): Promise<{ aliceToken: string; bobToken: string }> {
  const account = await newAccount();
  const aliceToken = await tokenFor(account.apiKey, { id: "alice", name: "Alice" }, "messaging");
  const bobToken = await tokenFor(account.apiKey, { id: "bob", name: "Bob" }, "messaging");
  const alice = actorFrom(await verifyAccessToken(aliceToken, "messaging"));
  for (const channelId of rooms) await createRoom(alice, { channelId });
  return { aliceToken, bobToken };
}
