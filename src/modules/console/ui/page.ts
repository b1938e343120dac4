/** What every console page is given: the session, the account in view, and a hook for leaving. */
import type { Answer, Session } from "./api";

export type AccountSummary = Answer<"get", "/accounts">[number];

export interface PageContext {
  session: Session;
  /** The account in view; undefined is every account (operators only). */
  account: string | undefined;
  accounts: AccountSummary[];
  refreshAccounts(): Promise<void>;
  /** Called when the page is left: closes live feeds and players. */
  onLeave(cleanup: () => void): void;
}

/** An account as people know it: its name, or its id when the list does not have it (yet). */
export function accountName(context: PageContext, id: string): string {
  return context.accounts.find((account) => account.id === id)?.name ?? id;
}
