/** The wire types of token generation: the route validates with them and the service takes their static types. */
import { t } from "elysia";
import { Name, Text } from "../../http/text";

// The examples make the body /swagger offers a request this route accepts as it stands (with a real API key):
// swagger-ui fills every field, and its own guesses ("string" for a URI or a duration) are refused.
const TokenUserModel = t.Object({
  id: t.Optional(Text({ maxLength: 256, description: "Generated when absent", example: "alice" })),
  name: t.Optional(Name({ maxLength: 256, example: "Alice" })),
  email: t.Optional(Text({ format: "email", maxLength: 320, example: "alice@example.com" })),
  avatar: t.Optional(Text({ format: "uri", maxLength: 2048, example: "https://example.com/alice.png" })),
  moderator: t.Optional(t.Boolean()),
});

/** A duration text ("24 hours", "2h", "90 minutes", "1 day"); a bare number means hours. */
const Duration = (example: string) => t.Union([Text({ maxLength: 64 }), t.Number()], { example });

export const TokenModel = {
  request: t.Object({
    apiKey: t.Optional(Text({ minLength: 1, maxLength: 256, description: "API key of the account" })),
    user: t.Optional(TokenUserModel),
    exp: t.Optional(Duration("2h")),
    // Empty: valid from now.
    nbf: t.Optional(Duration("")),
    scope: t.Optional(
      Text({ maxLength: 32, description: "messaging, media, parley, or empty for all", example: "media" }),
    ),
    room: t.Optional(
      Text({
        maxLength: 256,
        description:
          "media scope only: the one conference room the token admits " +
          "to, as users type it or as Jitsi names it; any room when absent",
        example: "Design Review",
      }),
    ),
  }),
  response: t.Object({ token: t.String() }),
};

/** What the service needs of a request: the API key has already named the account. */
export type TokenRequest = Omit<typeof TokenModel.request.static, "apiKey">;
