/**
 * The conference mapper (spec 4.5), in two forms. The spec's form takes the API key in
 * Authorization. jitsi-meet's dial-in page fetches `dialInConfCodeUrl?conference=...` and
 * `dialInNumbersUrl?conference=...` from the browser with no Authorization header, and an
 * API key in a public config.js would hand out a credential that issues tokens; so the same
 * operations are also served under the account id, which names the account but grants
 * nothing beyond these two read-or-map operations, with CORS open to any origin.
 */
import { Elysia, t } from "elysia";
import { auth } from "../auth";
import { ErrorModel, errorResponses } from "../../http/errors";
import { limits } from "../limits";
import { getAccount } from "../accounts";
import { MapperModel } from "./model";
import { listPhoneNumbers, resolveMapping } from "./service";

const PREFIX = "/api/v1/conference-mapper";

const PhoneNumberList = t.Array(MapperModel.phoneNumber, {
  description: "The array form jitsi-meet reads as the current number-list format",
});

async function numbersOf(accountId: string) {
  return (await listPhoneNumbers(accountId)).map(({ countryCode, formattedNumber, tollFree, isDefault }) => ({
    countryCode,
    formattedNumber,
    tollFree,
    default: isDefault,
  }));
}

/** The 405 body also carries `message` at the top, where mapper clients look for it. */
const MapperError = t.Composite([ErrorModel, t.Object({ message: t.Optional(t.String()) })]);

// 503: the account and its mappings are read from the database, credential or not (the API key guard adds 401).
const mappingResponses = { 200: MapperModel.mapping, 405: MapperError, ...errorResponses(404, 503) };

export const mapperController = new Elysia({ name: "parley.mapper", detail: { tags: ["conference-mapper"] } })
  .use(auth)
  .use(limits)
  .get(
    `${PREFIX}/conferenceMapper`,
    ({ account, query }) => resolveMapping(account.id, { conference: query.conference, id: query.id ?? query.cid }),
    {
      apiKey: true,
      limit: "mapper",
      query: MapperModel.query,
      response: mappingResponses,
      detail: { summary: "Create or look up the numeric id of a conference (API key in Authorization)" },
    },
  )
  .get(`${PREFIX}/phoneNumberList`, ({ account }) => numbersOf(account.id), {
    apiKey: true,
    limit: "mapper",
    query: MapperModel.numbersQuery,
    response: { 200: PhoneNumberList, ...errorResponses(401) },
    detail: { summary: "The account's dial-in numbers (API key in Authorization)" },
  })
  .get(
    `${PREFIX}/:accountId/conferenceMapper`,
    async ({ params, query, set }) => {
      set.headers["access-control-allow-origin"] = "*";
      await getAccount(params.accountId);
      return resolveMapping(params.accountId, { conference: query.conference, id: query.id ?? query.cid });
    },
    {
      publicLimit: true,
      params: MapperModel.accountParams,
      query: MapperModel.query,
      response: mappingResponses,
      detail: {
        summary:
          "As conferenceMapper, for a browser: the account in the path, no credential (jitsi-meet's dialInConfCodeUrl)",
        security: [],
      },
    },
  )
  .get(
    `${PREFIX}/:accountId/phoneNumberList`,
    async ({ params, set }) => {
      set.headers["access-control-allow-origin"] = "*";
      await getAccount(params.accountId);
      return numbersOf(params.accountId);
    },
    {
      publicLimit: true,
      params: MapperModel.accountParams,
      query: MapperModel.numbersQuery,
      response: { 200: PhoneNumberList, ...errorResponses(404, 503) },
      detail: {
        summary:
          "As phoneNumberList, for a browser: the account in the path, no credential (jitsi-meet's dialInNumbersUrl)",
        security: [],
      },
    },
  );
