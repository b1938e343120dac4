/**
 * Who is asking the admin API: the local operator on the Unix socket, or an operator token
 * (`Authorization: Bearer pop_…`). An account's API key or end-user token is refused, never
 * looked up as anything else. The check runs while the body is parsed (or, with none, in
 * transform): before validation, so a caller without a credential learns nothing of a
 * route's schema.
 */
import { Elysia } from "elysia";
import { AppError } from "../../core/errors";
import type { Caller, Operator } from "../audit";
import { isLocalRequest, localOperatorOf, socketPath } from "./local";
import { OPERATOR_TOKEN_PREFIX, operatorForToken } from "./tokens";

const READ_METHODS = new Set(["GET", "HEAD"]);

async function operatorOf(request: Request): Promise<Operator> {
  const local = localOperatorOf(request);
  if (local) return local;
  const bearer = /^Bearer\s+(\S+)$/i.exec(request.headers.get("authorization") ?? "")?.[1];
  if (!bearer?.startsWith(OPERATOR_TOKEN_PREFIX)) {
    throw new AppError(
      "operator_credential_required",
      "the admin API takes an operator token (Authorization: Bearer pop_…) or the " +
        "local socket; an account's API key or token is not an operator credential",
    );
  }
  const operator = await operatorForToken(bearer);
  if (operator.scope === "read" && !READ_METHODS.has(request.method))
    throw new AppError("forbidden", "this operator token may only read (scope read)");
  return operator;
}

const checked = new WeakMap<Request, Promise<Operator>>();

function checkOnce(request: Request): Promise<Operator> {
  let result = checked.get(request);
  if (!result) {
    result = operatorOf(request);
    checked.set(request, result);
  }
  return result;
}

const early = async ({ request }: { request: Request }) => {
  await checkOnce(request);
};

type Server = { requestIP(request: Request): { address: string } | null } | null;

function addressOf(request: Request, server: Server): string {
  if (isLocalRequest(request)) return `unix:${socketPath()}`;
  return server?.requestIP(request)?.address ?? "unknown";
}

/** Used by the admin controller: every route after it is an operator's alone. */
export const operatorGuard = new Elysia({ name: "parley.admin.guard" })
  .onParse({ as: "scoped" }, early)
  .onTransform({ as: "scoped" }, early)
  .resolve(
    { as: "scoped" },
    async ({ request, server }): Promise<{ caller: Caller }> => ({
      caller: { operator: await checkOnce(request), address: addressOf(request, server as Server) },
    }),
  );
