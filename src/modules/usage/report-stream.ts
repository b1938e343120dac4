/**
 * The usage report streamed, as JSON or CSV: the head goes out once the window is checked and
 * the room lives are read, so a report of thousands of meetings starts at once and is never
 * held whole as text.
 */
import { describeMeetings } from "./meetings";
import { reportDays } from "./report-days";
import type { ReportQuery } from "./report-window";
import { CSV_COLUMNS, csvLines, prepareCurrentReport, reportTotals } from "./service";

/** About this many bytes go out per chunk of a streamed report. */
const CHUNK_CHARS = 64 * 1024;

/** Joins the pieces of a streamed answer into chunks of about CHUNK_CHARS. */
function chunked(pieces: () => AsyncGenerator<string>): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  const source = pieces();
  // The first piece (the head) goes out alone, so the first byte never waits for the meetings.
  let head = true;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      let chunk = "";
      while (chunk.length < (head ? 1 : CHUNK_CHARS)) {
        const next = await source.next();
        if (next.done) {
          if (chunk !== "") controller.enqueue(encoder.encode(chunk));
          controller.close();
          return;
        }
        chunk += next.value;
      }
      head = false;
      controller.enqueue(encoder.encode(chunk));
    },
    async cancel() {
      await source.return(undefined);
    },
  });
}

/**
 * The report as streamed JSON, the same document usageReport answers: the head goes out
 * once the window is checked and the room lives are read (a refusal is still a 4xx or 5xx),
 * then meeting after meeting, the days and the totals.
 */
export async function usageReportJson(
  accountId: string,
  query: ReportQuery,
  now = new Date(),
): Promise<ReadableStream<Uint8Array>> {
  const prepared = await prepareCurrentReport(accountId, query, now);
  return chunked(async function* () {
    const { window, asOf } = prepared;
    const [start, end, asOfText] = [window.start, window.end, asOf].map((at) => JSON.stringify(at.toISOString()));
    yield `{"start_date":${start},"end_date":${end},"as_of":${asOfText},"rooms":[`;
    const described = await describeMeetings(prepared);
    for (const [index, { room }] of described.entries()) yield `${index === 0 ? "" : ","}${JSON.stringify(room)}`;
    const days = JSON.stringify(reportDays(described, asOf));
    yield `],"days":${days},"totals":${JSON.stringify(reportTotals(described))}}`;
  });
}

/** The report as streamed CSV (see reportCsv), its header line first. */
export async function usageReportCsv(
  accountId: string,
  query: ReportQuery,
  now = new Date(),
): Promise<ReadableStream<Uint8Array>> {
  const prepared = await prepareCurrentReport(accountId, query, now);
  return chunked(async function* () {
    yield `${CSV_COLUMNS.join(",")}\r\n`;
    const asOf = prepared.asOf.toISOString();
    for (const { room } of await describeMeetings(prepared)) yield csvLines(room, asOf);
  });
}
