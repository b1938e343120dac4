/** Calls the app in-process, as a client would over HTTP, and makes accounts for tests. */
import { createApp } from "../src/process/app";
import type { SigningAlgorithm } from "../src/core/config";
import { createAccount } from "../src/modules/accounts/service";

export const app = createApp();

export interface Answer<T = any> {
  status: number;
  body: T;
  headers: Headers;
}

export async function call<T = any>(
  method: string,
  path: string,
  options: { body?: unknown; headers?: Record<string, string>; raw?: string } = {},
): Promise<Answer<T>> {
  const headers = new Headers(options.headers);
  let body: string | undefined = options.raw;
  if (options.body !== undefined) {
    body = JSON.stringify(options.body);
    if (!headers.has("content-type")) headers.set("content-type", "application/json");
  }
  const response = await app.handle(new Request(`http://parley.test${path}`, { method, headers, body }));
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: response.status, body: parsed as T, headers: response.headers };
}

export async function newAccount(algorithm: SigningAlgorithm = "EdDSA") {
  const created = await createAccount(`test-${crypto.randomUUID().slice(0, 8)}`, algorithm);
  return { accountId: created.account.id, apiKey: created.apiKey.apiKey, kid: created.kid };
}

/** A token for a user of the account, issued through the public route. */
export async function tokenFor(
  apiKey: string,
  user: Record<string, unknown> = { id: "alice", name: "Alice" },
  scope = "",
) {
  const answer = await call("POST", "/api/v1/misc/generate-token", { body: { apiKey, user, scope } });
  if (answer.status !== 200) throw new Error(`token request failed: ${answer.status} ${JSON.stringify(answer.body)}`);
  return answer.body.token as string;
}
