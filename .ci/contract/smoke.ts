/**
 * Parley driven through the client @hey-api/openapi-ts generates from its /swagger/json, unedited:
 * test/contract/generated-client.test.ts generates it into ./client beside a copy of this file,
 * type-checks both under strict, and runs this against the running Parley ./target.ts names.
 * A step that does not get the success the client's types promise throws, naming the call; the
 * last line printed is what was seen, as JSON.
 */
import {
  deleteApiV1SchedulerReservationById,
  getApiV1MessagingRoomsByChannelIdMessages,
  getApiV1SchedulerReservation,
  postApiV1MessagingRoomsCreate,
  postApiV1MiscGenerateToken,
  postApiV1PricingCdr,
  postApiV1SchedulerReservation,
  postApiV1Webhooks,
} from "./client";
import { createClient, createConfig } from "./client/client";
import { apiKey, baseUrl, webhookUrl } from "./target";

interface Outcome<T> {
  data?: T;
  error?: unknown;
  response?: Response;
}

async function succeeded<T>(call: string, pending: Promise<Outcome<T>>): Promise<T> {
  const { data, error, response } = await pending;
  if (!response?.ok || data === undefined) throw new Error(`${call}: ${response?.status} ${JSON.stringify(error)}`);
  return data;
}

function check(holds: boolean, what: string): asserts holds {
  if (!holds) throw new Error(what);
}

// The client offers the API key for each scheme the description lists for a route, in its order;
// Basic (any user, the key as password) is for tools that speak only Basic, so it is passed over.
const account = createClient(
  createConfig({ baseUrl, auth: (scheme) => (scheme.scheme === "basic" ? undefined : apiKey) }),
);

const issued = await succeeded(
  "generate-token",
  postApiV1MiscGenerateToken({
    client: account,
    body: { apiKey, user: { id: "smoke", name: "Smoke" }, scope: "messaging" },
  }),
);
const user = createClient(createConfig({ baseUrl, auth: issued.token }));

const reservation = await succeeded(
  "create a reservation",
  postApiV1SchedulerReservation({
    client: account,
    body: {
      name: "smokeplan",
      mail_owner: "owner@example.com",
      start_time: "2031-01-01T10:00",
      duration: 30,
      timezone: "UTC",
    },
  }),
);
// Ids are the numbers Parley sends: this line does not compile where the description types them looser.
const reservationId: number = reservation.id;
check(typeof reservationId === "number", `the reservation's id is a number: ${JSON.stringify(reservationId)}`);
const listed = await succeeded("list reservations", getApiV1SchedulerReservation({ client: account }));
check(
  listed.some((each) => each.id === reservationId),
  "the new reservation is listed",
);
// The path takes the id as text: `1`, or `1.0` as Prosody's modules send it.
const deleted = await deleteApiV1SchedulerReservationById({ client: account, path: { id: String(reservationId) } });
check(
  deleted.response?.ok === true,
  `delete the reservation: ${deleted.response?.status} ${JSON.stringify(deleted.error)}`,
);
const after = await succeeded("list reservations again", getApiV1SchedulerReservation({ client: account }));
check(!after.some((each) => each.id === reservationId), "the deleted reservation is no longer listed");

await succeeded(
  "create a chat room",
  postApiV1MessagingRoomsCreate({ client: user, body: { channel_id: "smokechat" } }),
);
const history = await succeeded(
  "list chat messages",
  getApiV1MessagingRoomsByChannelIdMessages({ client: user, path: { channel_id: "smokechat" } }),
);
check("messages" in history && history.messages.length === 0, `a new room has no messages: ${JSON.stringify(history)}`);

const report = await succeeded("usage report", postApiV1PricingCdr({ client: account, body: {} }));
// The report is JSON unless CSV is asked for (Accept: text/csv).
check(typeof report !== "string" && Array.isArray(report.rooms), "the usage report lists rooms as JSON");

const webhook = await succeeded(
  "create a webhook endpoint",
  postApiV1Webhooks({ client: account, body: { url: webhookUrl, event_types: ["room.started"] } }),
);
check(webhook.secret.startsWith("whsec_"), "the endpoint's signing secret is shown once");

console.log(
  JSON.stringify({
    token: issued.token.split(".").length,
    reservation: reservationId,
    listed: listed.length,
    messages: history.messages.length,
    rooms: report.rooms.length,
    webhook: webhook.endpoint.url,
  }),
);
