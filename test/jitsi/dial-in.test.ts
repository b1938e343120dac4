/**
 * Parley's conference mapper and number list as jitsi-meet itself reads them: its own
 * dial-in code (react/features/invite/_utils.ts and functions.ts, with the base modules
 * they fetch through: base/util/httpUtils.ts, base/util/timeoutPromise.ts,
 * base/connection/utils.ts) fetches `dialInConfCodeUrl` and `dialInNumbersUrl` from a
 * running Parley over HTTP and picks the conference id and the default number. The code is
 * jitsi-meet's as the npm registry ships it (test/support/jitsi-meet.ts).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createApp } from "../../src/process/app";
import { addPhoneNumber, setDefaultPhoneNumber } from "../../src/modules/mapper/service";
import { newAccount } from "../helpers";
import {
  type JitsiMeetDialIn,
  type JitsiMeetRoomNames,
  jitsiMeetDialIn,
  jitsiMeetRoomNames,
} from "../support/jitsi-meet";

const MUC = "conference.meet.test";

describe("jitsi-meet's own dial-in code reading Parley", () => {
  let jitsi: JitsiMeetDialIn;
  let names: JitsiMeetRoomNames;
  let parley: ReturnType<ReturnType<typeof createApp>["listen"]>;
  let base: string;

  beforeAll(async () => {
    jitsi = await jitsiMeetDialIn();
    names = await jitsiMeetRoomNames();
    parley = createApp().listen({ hostname: "127.0.0.1", port: 0 });
    base = `http://127.0.0.1:${parley.server!.port}/api/v1/conference-mapper`;
  });

  afterAll(() => parley?.stop(true));

  test("the conference id: jitsi-meet's dialInConfCodeUrl request gets a conference and an id it accepts", async () => {
    const { accountId } = await newAccount();
    const dialInConfCodeUrl = `${base}/${accountId}/conferenceMapper`;
    const page = new URL("https://meet.test/standup?jwt=x#config.startSilent=true");
    const answer = await jitsi.getDialInConferenceID(dialInConfCodeUrl, "standup", MUC, page);
    // jitsi-meet drops an answer that lacks either of the two.
    expect(answer.conference).toBe(`standup@${MUC}`);
    expect(answer.id).toBeNumber();
    expect(jitsi._formatConferenceIDPin(answer.id).replaceAll(" ", "")).toBe(String(answer.id));
    // The same room asked again (the invite dialog, the dial-in page) is the same id.
    expect((await jitsi.getDialInConferenceID(dialInConfCodeUrl, "standup", MUC, page)).id).toBe(answer.id);
  });

  test("a room typed with a space: jitsi-meet asks with its own room name and gets the room's one id", async () => {
    const { accountId } = await newAccount();
    const dialInConfCodeUrl = `${base}/${accountId}/conferenceMapper`;
    const page = new URL("https://meet.test/Design%20Review");
    const room = names.getBackendSafeRoomName("Design%20Review")!;
    expect(room).toBe("design%20review");
    const answer = await jitsi.getDialInConferenceID(dialInConfCodeUrl, room, MUC, page);
    expect(answer.conference).toBe(`design%20review@${MUC}`);
    const typed = await fetch(`${dialInConfCodeUrl}?conference=${encodeURIComponent(`Design Review@${MUC}`)}`).then(
      (r) => r.json(),
    );
    expect(typed.id).toBe(answer.id);
  });

  test("the numbers: jitsi-meet shows the operator's default, not the first country", async () => {
    const { accountId } = await newAccount();
    await addPhoneNumber(accountId, { countryCode: "DE", formattedNumber: "0800 123 4567", tollFree: true });
    const us = await addPhoneNumber(accountId, {
      countryCode: "US",
      formattedNumber: "+1 512 555 0100",
      tollFree: false,
    });
    await addPhoneNumber(accountId, { countryCode: "GB", formattedNumber: "+44 20 7946 0000", tollFree: false });
    const dialInNumbersUrl = `${base}/${accountId}/phoneNumberList`;
    const dialInConfCodeUrl = `${base}/${accountId}/conferenceMapper`;

    // No default marked: jitsi-meet takes the first number listed.
    const unmarked = await jitsi.getDialInNumbers(dialInNumbersUrl, "standup", MUC);
    expect(jitsi._getDefaultPhoneNumber(unmarked)).toBe("0800 123 4567");

    await setDefaultPhoneNumber(us.id);
    const numbers = await jitsi.getDialInNumbers(dialInNumbersUrl, "standup", MUC);
    expect(Array.isArray(numbers)).toBe(true);
    expect(jitsi._getDefaultPhoneNumber(numbers)).toBe("+1 512 555 0100");
    expect(jitsi.hasMultipleNumbers(numbers)).toBe(true);
    const { id } = await jitsi.getDialInConferenceID(
      dialInConfCodeUrl,
      "standup",
      MUC,
      new URL("https://meet.test/standup"),
    );
    expect(jitsi.shouldDisplayDialIn({ conferenceID: id, numbers, numbersEnabled: true })).toBe(true);
  });

  test("an account without numbers: jitsi-meet shows no dial-in", async () => {
    const { accountId } = await newAccount();
    const numbers = await jitsi.getDialInNumbers(`${base}/${accountId}/phoneNumberList`, "standup", MUC);
    expect(numbers).toEqual([]);
    expect(jitsi._getDefaultPhoneNumber(numbers)).toBeNull();
    expect(jitsi.shouldDisplayDialIn({ conferenceID: 1234567, numbers, numbersEnabled: true })).toBe(false);
  });

  test("an unknown account is a rejected request to jitsi-meet, not a crash", async () => {
    await expect(jitsi.getDialInNumbers(`${base}/acc_missing/phoneNumberList`, "standup", MUC)).rejects.toMatchObject({
      error: { code: "not_found" },
    });
  });
});
