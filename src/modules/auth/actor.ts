/** The user a messaging token names, as chat and the socket's channels act for it. */
import type { VerifiedToken } from "./access-token";

export interface Actor {
  accountId: string;
  userId: string;
  /** The token's display name, or empty. */
  name: string;
  moderator: boolean;
  /** The token's scope covers the platform (`parley`): it may read what the account's API key reads. */
  platform?: boolean;
}

export function actorFrom(session: VerifiedToken): Actor {
  // PostgreSQL text cannot hold NUL, which a token's name could carry.
  const name = (session.user.name ?? "").replaceAll("\u0000", "");
  return {
    accountId: session.accountId,
    userId: session.user.id,
    name,
    moderator: session.user.moderator,
    platform: session.audiences.includes("parley"),
  };
}
