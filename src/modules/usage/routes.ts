import { Elysia, t } from "elysia";
import { platformAuth } from "../auth";
import { errorResponses } from "../../http/errors";
import { answerOf } from "../../http/openapi";
import { limits } from "../limits";
import { UsageModel } from "./model";
import { usageReportCsv, usageReportJson } from "./report-stream";

export const usageController = new Elysia({ name: "parley.usage", detail: { tags: ["usage"] } })
  .use(platformAuth)
  .use(limits)
  .post(
    "/api/v1/pricing/cdr",
    async ({ accountId, body, headers }) => {
      const query = { roomNames: body?.room_name, startDate: body?.start_date, endDate: body?.end_date };
      // Streamed, so a report of thousands of meetings starts at once and is never held whole as text.
      if (/\btext\/csv\b/i.test(headers.accept ?? "")) {
        return new Response(await usageReportCsv(accountId, query), {
          headers: { "content-type": "text/csv; charset=utf-8" },
        });
      }
      return new Response(await usageReportJson(accountId, query), { headers: { "content-type": "application/json" } });
    },
    {
      platform: true,
      limit: "usage",
      body: t.Optional(UsageModel.request),
      response: { 200: t.Union([UsageModel.report, UsageModel.csv]), ...errorResponses(400, 401, 403, 422) },
      detail: {
        summary: "Video call usage report (call detail records)",
        responses: {
          200: answerOf("The report: JSON, or CSV when the request's Accept names text/csv", {
            "application/json": UsageModel.report,
            "text/csv": UsageModel.csv,
          }),
        },
        description:
          "Meetings that started in the window, with each participant's stay, media use and Parley's totals. " +
          "Send `Accept: text/csv` for the same as CSV: one line per participant " +
          "stay (a room with nobody gets one line), room columns repeated. " +
          "Authorization: `Bearer <token>` with scope parley or empty, " +
          "`Bearer <API key>`, or HTTP Basic with the API key as password.",
      },
    },
  );
