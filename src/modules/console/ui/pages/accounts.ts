/** Accounts (operators create them) and their API and signing keys; a new key is shown once. */
import { api } from "../api";
import { field, h, notice, table, when } from "../dom";
import type { AccountSummary, PageContext } from "../page";

export function accountsPage(root: HTMLElement, context: PageContext): void {
  const status = notice();
  const secret = h("div", { class: "secret", "aria-live": "polite" });
  const list = h("div");
  const showSecret = (what: string, key: string) => {
    secret.replaceChildren(
      h("p", {}, `${what}. Copy it now: it is stored only as a hash and is never shown again.`),
      h("output", { class: "key", "data-new-key": "" }, key),
    );
  };
  const act = async (describe: string, action: () => Promise<void>) => {
    status.textContent = `${describe}…`;
    try {
      await action();
      status.textContent = `${describe}: done.`;
      await context.refreshAccounts();
      render();
    } catch (error) {
      status.textContent = `${describe}: ${error instanceof Error ? error.message : String(error)}`;
    }
  };

  const accountSection = (account: AccountSummary) => {
    const label = h("input", { name: "label", maxlength: 128 });
    return h(
      "section",
      { class: "account", "data-account": account.id },
      h("h2", {}, `${account.name} `, h("code", {}, account.id)),
      table(
        `API keys of ${account.name}`,
        ["Key", "Label", "Created", "State", "Actions"],
        account.apiKeys.map((key) => [
          h("code", {}, `#${key.id} ${key.prefix}…`),
          key.label || "—",
          when(key.createdAt),
          key.revokedAt ? h("span", {}, "revoked ", when(key.revokedAt)) : "active",
          key.revokedAt
            ? ""
            : h(
                "span",
                { class: "actions" },
                h(
                  "button",
                  {
                    type: "button",
                    onclick: () =>
                      void act(`Rotating key #${key.id}`, async () => {
                        const created = await api("post", "/accounts/:account/keys/:key/rotate", {
                          params: { account: account.id, key: key.id },
                        });
                        showSecret(`Key #${created.id} replaces #${key.id}`, created.apiKey);
                      }),
                  },
                  `Rotate key #${key.id}`,
                ),
                h(
                  "button",
                  {
                    type: "button",
                    class: "danger",
                    onclick: () =>
                      void act(`Revoking key #${key.id}`, async () => {
                        await api("delete", "/accounts/:account/keys/:key", {
                          params: { account: account.id, key: key.id },
                        });
                      }),
                  },
                  `Revoke key #${key.id}`,
                ),
              ),
        ]),
      ),
      h(
        "form",
        {
          class: "inline",
          onsubmit: (event: Event) => {
            event.preventDefault();
            void act(`Creating a key for ${account.name}`, async () => {
              const created = await api("post", "/accounts/:account/keys", {
                params: { account: account.id },
                body: { label: label.value },
              });
              showSecret(`New key #${created.id}`, created.apiKey);
            });
          },
        },
        field("New key label", label),
        h("button", { type: "submit" }, "Create API key"),
      ),
      table(
        `Signing keys of ${account.name}`,
        ["kid", "Algorithm", "Created", "State"],
        account.signingKeys.map((key) => [
          h("code", {}, key.kid),
          key.algorithm,
          when(key.createdAt),
          key.retiredAt ? h("span", {}, "retired; verifies until ", when(key.verifyUntil)) : "current",
        ]),
      ),
      h(
        "button",
        {
          type: "button",
          onclick: () =>
            void act(`Rotating the signing key of ${account.name}`, async () => {
              await api("post", "/accounts/:account/signing-keys", { params: { account: account.id } });
            }),
        },
        "Rotate signing key",
      ),
    );
  };

  // Every account the viewer may see, whichever is in view: a new one appears here at once.
  const render = () => list.replaceChildren(...context.accounts.map(accountSection));

  if (context.session.kind === "operator") {
    const name = h("input", { name: "name", required: true, maxlength: 128 });
    root.append(
      h(
        "form",
        {
          class: "inline",
          id: "create-account",
          onsubmit: (event: Event) => {
            event.preventDefault();
            void act(`Creating account ${name.value}`, async () => {
              const created = await api("post", "/accounts", { body: { name: name.value } });
              showSecret(
                `Account ${created.account.name} (${created.account.id}) and its first API key`,
                created.api_key.apiKey,
              );
            });
          },
        },
        field("New account name", name),
        h("button", { type: "submit" }, "Create account"),
      ),
    );
  }
  root.append(status, secret, list);
  render();
}
