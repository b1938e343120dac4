/** The mapper's wire types: the routes validate with them and the service answers their static types. */
import { t } from "elysia";
import { Text } from "../../http/text";

export const MapperModel = {
  query: t.Object(
    {
      conference: t.Optional(
        Text({
          maxLength: 3071,
          description: "room@conference.domain; creates or returns the mapping; wins over id",
          examples: ["standup@conference.meet.example.com"],
        }),
      ),
      id: t.Optional(
        Text({
          maxLength: 32,
          description: "a numeric id to look up; used only without conference",
          examples: ["123456789"],
        }),
      ),
      cid: t.Optional(Text({ maxLength: 32, description: "alias of id" })),
    },
    { additionalProperties: true },
  ),
  mapping: t.Object({
    message: t.String(),
    id: t.Number({ description: "6–10 digits, the last one a Damm check digit" }),
    conference: t.Union([t.String(), t.Literal(false)], { description: "false when the id maps to nothing" }),
  }),
  numbersQuery: t.Object(
    { conference: t.Optional(Text({ maxLength: 3071, description: "accepted and ignored: numbers are per account" })) },
    { additionalProperties: true },
  ),
  phoneNumber: t.Object({
    countryCode: t.String({ examples: ["US"] }),
    formattedNumber: t.String({ examples: ["+1 512 555 0100"] }),
    tollFree: t.Boolean(),
    default: t.Boolean({
      description: "The number to offer first; jitsi-meet shows it in the meeting's invite. Listed first.",
    }),
  }),
  accountParams: t.Object({
    accountId: Text({ maxLength: 64, description: "The account's id (not a secret; see README)" }),
  }),
};

export type MappingAnswer = typeof MapperModel.mapping.static;
