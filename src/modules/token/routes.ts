import { Elysia } from "elysia";
import { credentialFrom } from "../../http/credential";
import { AppError } from "../../core/errors";
import { errorResponses } from "../../http/errors";
import { accountForApiKey } from "../accounts";
import { applyRequestLimit } from "../limits";
import { TokenModel } from "./model";
import { issueToken } from "./service";

export const tokenController = new Elysia({ name: "parley.token", detail: { tags: ["token"] } }).post(
  "/api/v1/misc/generate-token",
  async ({ body, headers, set }) => {
    // The scheduling clients put the key in the body; messaging clients send it as Bearer too.
    const apiKey = body.apiKey ?? credentialFrom(headers.authorization);
    if (!apiKey)
      throw new AppError("unauthorized", "failed to generate token: no apiKey in the body or Authorization header");
    const account = await accountForApiKey(apiKey).catch((error: unknown) => {
      throw error instanceof AppError ? new AppError(error.code, `failed to generate token: ${error.message}`) : error;
    });
    // Counted once the key is known good: the limits are per account and per key.
    await applyRequestLimit(set, "token", { accountId: account.id, apiKey });
    const { apiKey: _key, ...request } = body;
    const token = await issueToken(account, request);
    return { token };
  },
  {
    body: TokenModel.request,
    // 503: the key and the signing key are read from the database.
    response: { 200: TokenModel.response, ...errorResponses(400, 401, 422, 429, 503) },
    detail: { summary: "Issue a signed JWT for an end user of the account", security: [{ apiKey: [] }, {}] },
  },
);
