/**
 * The operator console at /console: its page and script, sign-in and sign-out, and the JSON
 * API its pages call. Every figure comes from the services the public API uses; guard.ts
 * checks who is asking, and the routes here which account they may see. The webhooks page's
 * routes are webhook-routes.ts, the shapes they share model.ts.
 */
import { Elysia, t } from "elysia";
import { config } from "../../core/config";
import { AppError } from "../../core/errors";
import { errorBody } from "../../http/errors";
import { Name } from "../../http/text";
import { AuditModel, listAudit } from "../audit";
import { createAccount, createApiKey, listAccounts, revokeApiKey, rotateSigningKey } from "../accounts";
import { listPhoneNumbers, resolveMapping } from "../mapper";
import { deleteMessages, listMessages, listRooms } from "../chat";
import type { Actor } from "../auth";
import { createReservation, deleteReservation, listConferences, listReservations } from "../scheduler";
import { stopStream } from "../streaming";
import { reportCsv, usageReport } from "../usage";
import { CONSOLE_PAGE, consoleAssets } from "./bundle";
import { API, consoleAuth, sessionBody, sessionCookie, sessionProbe } from "./guard";
import { liveFeed } from "./live";
import { ConsoleModel } from "./model";
import { overview, streamsView } from "./service";
import {
  accountInView,
  accountLogin,
  loginBlockedFor,
  operatorLogin,
  requireAccount,
  requireOperator,
  revokeSession,
  type Viewer,
} from "./sessions";
import { consoleWebhookRoutes } from "./webhook-routes";

async function accountsFor(viewer: Viewer) {
  const accounts = await listAccounts();
  return viewer.kind === "operator" ? accounts : accounts.filter((account) => account.id === viewer.accountId);
}

async function apiKeyOf(viewer: Viewer, accountId: string, keyId: number) {
  const account = (await accountsFor(viewer)).find((candidate) => candidate.id === requireAccount(viewer, accountId));
  const key = account?.apiKeys.find((candidate) => candidate.id === keyId && candidate.revokedAt === null);
  if (!account || !key) throw new AppError("not_found", `no active API key #${keyId} in that account`);
  return key;
}

/** The console acts in chat as a moderator named after the person signed in. */
function chatActor(viewer: Viewer, accountId: string): Actor {
  return { accountId, userId: `console:${viewer.name}`, name: viewer.name, moderator: true };
}

// Scripts only from Parley itself, and never inside another site's frame.
const PAGE_POLICY = "script-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

const page = () =>
  new Response(CONSOLE_PAGE, {
    headers: {
      "content-type": "text/html; charset=utf-8",
      "cache-control": "no-store",
      "content-security-policy": PAGE_POLICY,
      "x-frame-options": "DENY",
    },
  });

export const consoleController = new Elysia({ name: "parley.console", detail: { tags: ["console"], hide: true } })
  .get("/console", page)
  .get("/console/", page)
  .get("/console/:file", async ({ params, request }) => {
    const file = (await consoleAssets()).files.get(params.file);
    if (!file) throw new AppError("not_found", "no such console file");
    if (!/\bgzip\b/.test(request.headers.get("accept-encoding") ?? ""))
      return new Response(file.body, { headers: { "content-type": file.type, vary: "accept-encoding" } });
    return new Response(file.gzip, {
      headers: { "content-type": file.type, "content-encoding": "gzip", vary: "accept-encoding" },
    });
  })
  .use(consoleAuth)
  .post(
    `${API}/login`,
    async ({ body, consoleJwt, request, server, set }) => {
      const address = server?.requestIP(request)?.address;
      const attempt = { address: address ?? "unknown", name: body.api_key ? "api-key" : (body.name ?? "") };
      const wait = await loginBlockedFor(attempt);
      if (wait > 0) {
        set.status = 429;
        set.headers["retry-after"] = String(wait);
        return errorBody("rate_limited", `too many failed sign-ins; try again in ${wait} seconds`);
      }
      let viewer: Viewer;
      if (body.api_key) viewer = await accountLogin(body.api_key, attempt);
      else if (body.name && body.password !== undefined)
        viewer = await operatorLogin(body.name, body.password, attempt);
      else throw new AppError("validation_failed", "give name and password (operator) or api_key (account owner)");
      set.headers["set-cookie"] = sessionCookie(
        request,
        await consoleJwt.sign({ sid: viewer.sessionId }),
        config.console.tokenTtlSeconds,
      );
      return sessionBody(viewer);
    },
    { body: ConsoleModel.login },
  )
  .post(`${API}/logout`, async ({ viewer, request, set }) => {
    await revokeSession(viewer.sessionId);
    set.headers["set-cookie"] = sessionCookie(request, "", 0);
    return { signed_out: true };
  })
  .get(`${API}/session`, ({ request }) => sessionProbe(request), { response: { 200: ConsoleModel.session } })
  .get(
    `${API}/audit`,
    ({ viewer, query }) => {
      requireOperator(viewer);
      return listAudit(query);
    },
    { query: AuditModel.query },
  )
  .get(`${API}/accounts`, async ({ viewer }) => accountsFor(viewer))
  .post(
    `${API}/accounts`,
    async ({ viewer, body }) => {
      requireOperator(viewer);
      const name = body.name.trim();
      if (name === "") throw new AppError("validation_failed", "name: must not be empty");
      const { account, apiKey } = await createAccount(name);
      return { account, api_key: apiKey };
    },
    { body: t.Object({ name: Name({ maxLength: 128 }) }) },
  )
  .post(
    `${API}/accounts/:account/keys`,
    async ({ viewer, params, body }) => createApiKey(requireAccount(viewer, params.account), body.label ?? ""),
    { body: t.Object({ label: t.Optional(Name({ maxLength: 128 })) }) },
  )
  .delete(
    `${API}/accounts/:account/keys/:key`,
    async ({ viewer, params }) => {
      const key = await apiKeyOf(viewer, params.account, params.key);
      await revokeApiKey(key.id);
      return { revoked: key.id };
    },
    { params: t.Object({ account: t.String(), key: t.Integer() }) },
  )
  .post(
    `${API}/accounts/:account/keys/:key/rotate`,
    async ({ viewer, params }) => {
      const key = await apiKeyOf(viewer, params.account, params.key);
      // The new key exists before the old one stops, so nothing that rotates is ever keyless.
      const created = await createApiKey(params.account, key.label);
      await revokeApiKey(key.id);
      return { ...created, replaces: key.id };
    },
    { params: t.Object({ account: t.String(), key: t.Integer() }) },
  )
  .post(`${API}/accounts/:account/signing-keys`, async ({ viewer, params }) => ({
    kid: await rotateSigningKey(requireAccount(viewer, params.account)),
  }))
  .get(`${API}/overview`, ({ viewer, query }) => overview(accountInView(viewer, query.account)), {
    query: ConsoleModel.accountQuery,
  })
  .get(
    `${API}/live`,
    ({ viewer, query, request }) => liveFeed(request, viewer, accountInView(viewer, query.account), query.view),
    {
      query: t.Object({
        account: t.Optional(t.String({ maxLength: 64 })),
        view: t.Union([t.Literal("overview"), t.Literal("streams")]),
      }),
    },
  )
  .get(
    `${API}/usage`,
    async ({ viewer, query }) => {
      const report = await usageReport(requireAccount(viewer, query.account), {
        startDate: query.start,
        endDate: query.end,
      });
      return {
        start_date: report.start_date,
        end_date: report.end_date,
        as_of: report.as_of,
        days: report.days,
        totals: report.totals,
      };
    },
    { query: ConsoleModel.window },
  )
  .get(
    `${API}/usage.csv`,
    async ({ viewer, query }) => {
      const report = await usageReport(requireAccount(viewer, query.account), {
        startDate: query.start,
        endDate: query.end,
      });
      return new Response(reportCsv(report), {
        headers: {
          "content-type": "text/csv; charset=utf-8",
          "content-disposition": `attachment; filename="usage-${report.start_date.slice(0, 10)}.csv"`,
        },
      });
    },
    { query: ConsoleModel.window },
  )
  .get(`${API}/streams`, ({ viewer, query }) => streamsView(accountInView(viewer, query.account)), {
    query: ConsoleModel.accountQuery,
  })
  .post(
    `${API}/streams/stop`,
    async ({ viewer, body }) => stopStream(requireAccount(viewer, body.account), body.room),
    { body: t.Object({ account: t.String({ maxLength: 64 }), room: t.String({ maxLength: 1024 }) }) },
  )
  .get(
    `${API}/scheduler`,
    async ({ viewer, query }) => {
      const accountId = requireAccount(viewer, query.account);
      const [reservations, conferences] = await Promise.all([listReservations(accountId), listConferences(accountId)]);
      return { reservations, conferences };
    },
    { query: ConsoleModel.accountQuery },
  )
  .post(
    `${API}/scheduler/reservations`,
    async ({ viewer, body }) => {
      const { account, ...input } = body;
      return createReservation(requireAccount(viewer, account), input);
    },
    {
      body: t.Object({
        account: t.String({ maxLength: 64 }),
        name: t.String({ maxLength: 255 }),
        mail_owner: t.String({ maxLength: 320 }),
        start_time: t.String({ maxLength: 64 }),
        duration: t.Union([t.Number(), t.String({ maxLength: 32 })]),
        timezone: t.Optional(t.String({ maxLength: 64 })),
      }),
    },
  )
  .delete(
    `${API}/scheduler/reservations/:id`,
    async ({ viewer, params, query }) => deleteReservation(requireAccount(viewer, query.account), params.id),
    { query: ConsoleModel.accountQuery },
  )
  .get(
    `${API}/phone`,
    async ({ viewer, query }) => {
      const accountId = requireAccount(viewer, query.account);
      const report = await usageReport(accountId, { startDate: query.start, endDate: query.end });
      const calls = report.rooms.flatMap((room) =>
        room.media_usage.calls.map((call) => ({ room: room.room_id, ...call })),
      );
      return {
        numbers: await listPhoneNumbers(accountId),
        calls: calls.sort((a, b) => b.started_at.localeCompare(a.started_at)),
      };
    },
    { query: ConsoleModel.window },
  )
  .get(
    `${API}/phone/mapper`,
    async ({ viewer, query }) => resolveMapping(requireAccount(viewer, query.account), { conference: query.room }),
    { query: t.Object({ account: t.Optional(t.String({ maxLength: 64 })), room: t.String({ maxLength: 1024 }) }) },
  )
  .get(
    `${API}/chat/rooms`,
    async ({ viewer, query }) => {
      const accountId = requireAccount(viewer, query.account);
      return listRooms(chatActor(viewer, accountId));
    },
    { query: ConsoleModel.accountQuery },
  )
  .get(
    `${API}/chat/messages`,
    async ({ viewer, query }) => {
      const accountId = requireAccount(viewer, query.account);
      return listMessages(chatActor(viewer, accountId), query.channel, { size: 50 });
    },
    { query: t.Object({ account: t.Optional(t.String({ maxLength: 64 })), channel: t.String({ maxLength: 128 }) }) },
  )
  .post(
    `${API}/chat/delete`,
    async ({ viewer, body }) => {
      const accountId = requireAccount(viewer, body.account);
      return {
        message: await deleteMessages(chatActor(viewer, accountId), body.channel, { messageIds: body.message_ids }),
      };
    },
    {
      body: t.Object({
        account: t.String({ maxLength: 64 }),
        channel: t.String({ maxLength: 128 }),
        message_ids: t.Array(t.Integer({ minimum: 1 }), { minItems: 1, maxItems: 100 }),
      }),
    },
  )
  .use(consoleWebhookRoutes);
