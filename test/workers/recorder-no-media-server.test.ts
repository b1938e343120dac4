/**
 * A stream started with no media server at the ingest: the answer says which setting to
 * fix and the address tried, and ffmpeg's own lines are in the log. The real ffmpeg driver,
 * in Parley started as a user starts it, on the embedded database and on PostgreSQL.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { newAccount } from "../helpers";
import { http, type Parley, startParley, within } from "../support/parley";
import { freePort } from "../support/ports";

for (const mode of [
  { name: "the embedded database", embedded: true },
  { name: "PostgreSQL", embedded: false },
]) {
  describe(`a stream with no media server, on ${mode.name}`, () => {
    let parley: Parley | undefined;

    afterAll(async () => {
      await parley?.close();
    });

    test("503 names STREAMING_RTMP_INGEST_URL and the address tried; ffmpeg's lines are logged", async () => {
      // Nothing listens there: freePort closed it again.
      const port = await freePort();
      parley = await startParley({
        embedded: mode.embedded,
        env: {
          BOOTSTRAP_ACCOUNT: String(mode.embedded),
          SIP_ENABLED: "false",
          STREAMING_RTMP_INGEST_URL: `rtmp://127.0.0.1:${port}/live`,
        },
      });
      const apiKey = mode.embedded ? await parley.firstApiKey() : (await newAccount()).apiKey;
      const answer = await http(parley, "POST", "/terraform/v1/hooks/srs/startRecording", {
        body: { room_name: "weekly" },
        auth: apiKey,
      });
      expect(answer.status).toBe(503);
      expect(answer.body.started).toBe(false);
      expect(answer.body.error.message).toMatch(
        new RegExp(
          "^the stream could not start: media_server_unreachable: " +
            `no media server answers at 127\\.0\\.0\\.1:${port} \\(ECONNREFUSED\\); ` +
            "start it, or set STREAMING_RTMP_INGEST_URL " +
            `\\(now rtmp://127\\.0\\.0\\.1:${port}/live\\) to its RTMP application$`,
        ),
      );
      // ffmpeg's own words, with the address kept and the stream's path (where keys travel) cut.
      const said = await within(parley, "ffmpeg's output in the log", 10_000, async () =>
        parley!
          .tail(400)
          .split("\n")
          .find((line) => line.includes("recorder said") && line.includes("Connection refused")),
      );
      const { stream, output } = JSON.parse(said) as { stream: string; output: string };
      expect(output).toContain(`127.0.0.1:${port}`);
      expect(stream).toStartWith("weekly-");
      expect(output).not.toContain(stream);
      // A fresh embedded database is made on the first start, which a busy machine stretches.
    }, 120_000);
  });
}
