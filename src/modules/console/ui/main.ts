/** The console's shell: sign-in, navigation, the account picker, and the page in view. */
import { api, ApiError, type Session, useSession } from "./api";
import { resetCharts } from "./charts";
import { field, h, notice } from "./dom";
import type { PageContext } from "./page";
import { accountsPage } from "./pages/accounts";
import { auditPage } from "./pages/audit";
import { chatPage } from "./pages/chat";
import { overviewPage } from "./pages/overview";
import { phonePage } from "./pages/phone";
import { schedulerPage } from "./pages/scheduler";
import { streamsPage } from "./pages/streams";
import { usagePage } from "./pages/usage";
import { webhooksPage } from "./pages/webhooks";

type Page = (root: HTMLElement, context: PageContext) => Promise<void> | void;

const PAGES: Array<{ path: string; title: string; render: Page; needsAccount: boolean }> = [
  { path: "overview", title: "Overview", render: overviewPage, needsAccount: false },
  { path: "usage", title: "Usage", render: usagePage, needsAccount: true },
  { path: "streams", title: "Streams", render: streamsPage, needsAccount: false },
  { path: "accounts", title: "Accounts and keys", render: accountsPage, needsAccount: false },
  { path: "scheduler", title: "Scheduler", render: schedulerPage, needsAccount: true },
  { path: "phone", title: "Phone", render: phonePage, needsAccount: true },
  { path: "chat", title: "Chat", render: chatPage, needsAccount: true },
  { path: "webhooks", title: "Webhooks", render: webhooksPage, needsAccount: true },
  { path: "audit", title: "Audit", render: auditPage, needsAccount: false },
];

const app = document.getElementById("app")!;
let cleanups: Array<() => void> = [];

function leave(): void {
  for (const cleanup of cleanups) cleanup();
  cleanups = [];
  resetCharts();
}

function loginPage(message = ""): void {
  leave();
  document.title = "Sign in · Parley console";
  const status = notice();
  status.textContent = message;
  const name = h("input", { name: "name", autocomplete: "username", required: true });
  const password = h("input", { name: "password", type: "password", autocomplete: "current-password", required: true });
  const apiKey = h("input", { name: "api_key", type: "password", autocomplete: "off", required: true });
  const submit = (body: Record<string, string>) => async (event: Event) => {
    event.preventDefault();
    status.textContent = "Signing in…";
    try {
      const session = await api("post", "/login", { body });
      // A refused sign-in is an error answer; a 200 always carries the session.
      if ("signed_in" in session) await start(session);
    } catch (error) {
      status.textContent = error instanceof ApiError ? error.message : "The console could not reach Parley.";
    }
  };
  app.replaceChildren(
    h(
      "main",
      { class: "login" },
      h("h1", {}, "Parley console"),
      status,
      h(
        "form",
        {
          id: "operator-login",
          onsubmit: (event: Event) => submit({ name: name.value, password: password.value })(event),
        },
        h("h2", {}, "Operator"),
        h(
          "p",
          { class: "hint" },
          "An operator is made on the server, beside Parley: ",
          h("code", {}, "npm run parley -- create-operator <name>"),
          ".",
        ),
        field("Name", name),
        field("Password", password),
        h("button", { type: "submit" }, "Sign in as operator"),
      ),
      h(
        "form",
        { id: "account-login", onsubmit: (event: Event) => submit({ api_key: apiKey.value })(event) },
        h("h2", {}, "Account owner"),
        h(
          "p",
          { class: "hint" },
          "The first account's API key is in ",
          h("code", {}, "data/first-api-key"),
          " on the server; ",
          h("code", {}, "npm run parley -- create-key <account-id>"),
          " makes another.",
        ),
        field("API key", apiKey),
        h("button", { type: "submit" }, "Sign in with API key"),
      ),
    ),
  );
  name.focus();
}

function currentPath(): string {
  const path = location.hash.replace(/^#\/?/, "").split("?")[0] ?? "";
  return PAGES.some((page) => page.path === path) ? path : "overview";
}

/** The account last chosen in this browser ("" for every account), and the last single one. */
const CHOSEN = "parley-account";
const LAST_SINGLE = "parley-last-account";

async function start(session: Session): Promise<void> {
  useSession(session);
  const picker = h("select", { name: "account" });
  const known = (id: string | null) => (id && context.accounts.some((account) => account.id === id) ? id : undefined);
  /** The operator's choice: an account, or every account (undefined). */
  let chosen: string | undefined;
  const context: PageContext = {
    session,
    account: undefined,
    accounts: [],
    // A page that changes the accounts (a new one) has the picker follow.
    async refreshAccounts() {
      context.accounts = await api("get", "/accounts");
      picker.replaceChildren(
        ...(session.kind === "operator" ? [h("option", { value: "" }, "All accounts")] : []),
        ...context.accounts.map((account) => h("option", { value: account.id }, `${account.name} (${account.id})`)),
      );
      picker.value = context.account ?? "";
    },
    onLeave(cleanup) {
      cleanups.push(cleanup);
    },
  };
  await context.refreshAccounts();
  // An owner sees their account; an operator opens on the account last chosen here, or on the only one.
  const remembered = localStorage.getItem(CHOSEN);
  if (session.account_id) chosen = session.account_id;
  else if (remembered !== null && (remembered === "" || known(remembered))) chosen = remembered || undefined;
  else if (context.accounts.length === 1) chosen = context.accounts[0]!.id;

  const main = h("main", { id: "page", tabindex: -1 });
  const nav = h(
    "nav",
    { "aria-label": "Console pages" },
    h(
      "ul",
      {},
      ...PAGES.map((page) => h("li", {}, h("a", { href: `#/${page.path}`, "data-page": page.path }, page.title))),
    ),
  );
  const showPage = async () => {
    leave();
    const path = currentPath();
    const page = PAGES.find((candidate) => candidate.path === path)!;
    document.title = `${page.title} · Parley console`;
    for (const link of nav.querySelectorAll("a")) {
      if (link.dataset.page === path) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
    main.replaceChildren(h("h1", {}, page.title));
    // A page about one account, with every account chosen, shows the last single one chosen (or the first).
    context.account = page.needsAccount
      ? (chosen ?? known(localStorage.getItem(LAST_SINGLE)) ?? context.accounts[0]?.id)
      : chosen;
    picker.value = context.account ?? "";
    const everyAccount = picker.querySelector<HTMLOptionElement>('option[value=""]');
    if (everyAccount) everyAccount.disabled = page.needsAccount;
    if (page.needsAccount && !context.account) {
      main.append(h("p", { class: "empty" }, "There is no account yet: create one on Accounts and keys."));
      return;
    }
    try {
      await page.render(main, context);
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) return loginPage("Your session has ended; sign in again.");
      main.append(h("p", { class: "error", role: "alert" }, error instanceof Error ? error.message : String(error)));
    }
  };
  picker.disabled = session.kind === "account";
  picker.addEventListener("change", () => {
    chosen = picker.value || undefined;
    localStorage.setItem(CHOSEN, picker.value);
    if (chosen) localStorage.setItem(LAST_SINGLE, chosen);
    void showPage();
  });
  const signOut = h("button", { type: "button", class: "secondary" }, "Sign out");
  signOut.addEventListener("click", async () => {
    await api("post", "/logout").catch(() => {});
    loginPage("Signed out.");
  });
  app.replaceChildren(
    h("a", { href: "#page", class: "skip" }, "Skip to the page"),
    h(
      "header",
      {},
      h("p", { class: "brand" }, "Parley console"),
      field("Account", picker),
      h("p", { class: "who" }, `${session.kind === "operator" ? "Operator" : "Account owner"}: ${session.name}`),
      h("a", { href: "/swagger", class: "api-link" }, "API reference"),
      signOut,
    ),
    nav,
    main,
  );
  // The focus moves with the heading, before the page's data arrives.
  window.onhashchange = () => {
    const shown = showPage();
    main.focus();
    void shown;
  };
  await showPage();
}

// Signed out is an answer of the probe, not an error: the first load logs nothing in the browser's console.
api("get", "/session").then(
  (session) => (session.signed_in ? start(session) : loginPage()),
  () => loginPage("The console could not reach Parley."),
);
