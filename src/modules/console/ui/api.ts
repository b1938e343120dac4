/** Calls to the console's API: the session cookie goes along by itself, the CSRF token is added to every change. */
export interface Session {
  kind: "operator" | "account";
  name: string;
  account_id: string | null;
  csrf_token: string;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

let csrf = "";
export function useSession(session: Session): void {
  csrf = session.csrf_token;
}

export async function api<T = unknown>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = {};
  if (body !== undefined) headers["content-type"] = "application/json";
  if (method !== "GET") headers["x-csrf-token"] = csrf;
  const response = await fetch(`/console/api${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: "same-origin" });
  const text = await response.text();
  const parsed = text ? JSON.parse(text) : null;
  if (!response.ok) throw new ApiError(response.status, parsed?.error?.code ?? "error", parsed?.error?.message ?? response.statusText);
  return parsed as T;
}

export function query(params: Record<string, string | undefined>): string {
  const entries = Object.entries(params).filter((entry): entry is [string, string] => entry[1] !== undefined && entry[1] !== "");
  return entries.length === 0 ? "" : `?${new URLSearchParams(entries)}`;
}
