/** What every console page is given: the session, the account in view, and a hook for leaving. */
import type { Session } from "./api";

export interface AccountSummary {
  id: string;
  name: string;
  apiKeys: Array<{ id: number; prefix: string; label: string; createdAt: string; revokedAt: string | null }>;
  signingKeys: Array<{ kid: string; algorithm: string; createdAt: string; retiredAt: string | null; verifyUntil: string | null }>;
}

export interface PageContext {
  session: Session;
  /** The account in view; undefined is every account (operators only). */
  account: string | undefined;
  accounts: AccountSummary[];
  refreshAccounts(): Promise<void>;
  /** Called when the page is left: closes live feeds and players. */
  onLeave(cleanup: () => void): void;
}
