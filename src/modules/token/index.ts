import { Elysia, t } from "elysia";
import { credentialFrom } from "../auth";
import { AppError } from "../../core/errors";
import { errorResponses } from "../../http/errors";
import { Text } from "../../http/text";
import { accountForApiKey } from "../accounts/service";
import { applyRequestLimit } from "../limits";
import { issueToken } from "./service";

/** A duration text ("24 hours", "2h", "90 minutes", "1 day"); a bare number means hours. */
const Duration = t.Union([Text({ maxLength: 64 }), t.Number()]);

export const TokenModel = {
  request: t.Object({
    apiKey: t.Optional(Text({ minLength: 1, maxLength: 256, description: "API key of the account" })),
    user: t.Optional(
      t.Object({
        id: t.Optional(Text({ maxLength: 256, description: "Generated when absent" })),
        name: t.Optional(Text({ maxLength: 256 })),
        email: t.Optional(Text({ format: "email", maxLength: 320 })),
        avatar: t.Optional(Text({ format: "uri", maxLength: 2048 })),
        moderator: t.Optional(t.Boolean()),
      }),
    ),
    exp: t.Optional(Duration),
    nbf: t.Optional(Duration),
    scope: t.Optional(Text({ maxLength: 32, description: "messaging, media, parley, or empty for all" })),
    room: t.Optional(
      Text({
        maxLength: 256,
        description: "media scope only: the one conference room the token admits to, as users type it or as Jitsi names it; any room when absent",
        examples: ["Design Review"],
      }),
    ),
  }),
  response: t.Object({ token: t.String() }),
};

const asText = (value: string | number | undefined) => (value === undefined ? undefined : String(value));

export const tokenController = new Elysia({ name: "parley.token", detail: { tags: ["token"] } }).post(
  "/api/v1/misc/generate-token",
  async ({ body, headers, set }) => {
    // The scheduling clients put the key in the body; messaging clients send it as Bearer too.
    const apiKey = body.apiKey ?? credentialFrom(headers.authorization);
    if (!apiKey) throw new AppError("unauthorized", "failed to generate token: no apiKey in the body or Authorization header");
    const account = await accountForApiKey(apiKey).catch((error: unknown) => {
      throw error instanceof AppError ? new AppError(error.code, `failed to generate token: ${error.message}`) : error;
    });
    // Counted once the key is known good: the limits are per account and per key.
    await applyRequestLimit(set, "token", { accountId: account.id, apiKey });
    const token = await issueToken(account, {
      user: body.user,
      exp: asText(body.exp),
      nbf: asText(body.nbf),
      scope: body.scope,
      room: body.room,
    });
    return { token };
  },
  {
    body: TokenModel.request,
    response: { 200: TokenModel.response, ...errorResponses(400, 401, 422, 429) },
    detail: { summary: "Issue a signed JWT for an end user of the account", security: [{ apiKey: [] }, {}] },
  },
);
