/** The console's shell: sign-in, navigation, the account picker, and the page in view. */
import { api, ApiError, type Session, useSession } from "./api";
import { resetCharts } from "./charts";
import { field, h, notice } from "./dom";
import type { AccountSummary, PageContext } from "./page";
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
      const session = await api<Session>("POST", "/login", body);
      start(session);
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
        { id: "operator-login", onsubmit: (event: Event) => submit({ name: name.value, password: password.value })(event) },
        h("h2", {}, "Operator"),
        field("Name", name),
        field("Password", password),
        h("button", { type: "submit" }, "Sign in as operator"),
      ),
      h(
        "form",
        { id: "account-login", onsubmit: (event: Event) => submit({ api_key: apiKey.value })(event) },
        h("h2", {}, "Account owner"),
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

async function start(session: Session): Promise<void> {
  useSession(session);
  const picker = h("select", { name: "account" });
  const context: PageContext = {
    session,
    account: session.account_id ?? (sessionStorage.getItem("parley-account") || undefined),
    accounts: [],
    // A page that changes the accounts (a new one) has the picker follow.
    async refreshAccounts() {
      context.accounts = await api<AccountSummary[]>("GET", "/accounts");
      picker.replaceChildren(
        ...(session.kind === "operator" ? [h("option", { value: "" }, "All accounts")] : []),
        ...context.accounts.map((account) => h("option", { value: account.id, selected: account.id === context.account }, `${account.name} (${account.id})`)),
      );
    },
    onLeave(cleanup) {
      cleanups.push(cleanup);
    },
  };
  await context.refreshAccounts();
  if (context.account && !context.accounts.some((account) => account.id === context.account)) context.account = undefined;

  const main = h("main", { id: "page", tabindex: -1 });
  const nav = h("nav", { "aria-label": "Console pages" }, h("ul", {}, ...PAGES.map((page) => h("li", {}, h("a", { href: `#/${page.path}`, "data-page": page.path }, page.title)))));
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
    if (page.needsAccount && !context.account) {
      main.append(h("p", { class: "empty" }, "Choose an account above to see this page."));
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
    context.account = picker.value || undefined;
    sessionStorage.setItem("parley-account", picker.value);
    void showPage();
  });
  const signOut = h("button", { type: "button", class: "secondary" }, "Sign out");
  signOut.addEventListener("click", async () => {
    await api("POST", "/logout").catch(() => {});
    sessionStorage.removeItem("parley-account");
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
  window.onhashchange = () => {
    void showPage().then(() => main.focus());
  };
  await showPage();
}

api<Session>("GET", "/session").then(start, () => loginPage());
