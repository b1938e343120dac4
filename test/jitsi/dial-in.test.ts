/**
 * Parley's conference mapper and number list as jitsi-meet itself reads them: its own
 * dial-in code (react/features/invite/_utils.ts and functions.ts, with the base modules
 * they fetch through: base/util/httpUtils.ts, base/util/timeoutPromise.ts,
 * base/connection/utils.ts) fetches `dialInConfCodeUrl` and `dialInNumbersUrl` from a
 * running Parley over HTTP and picks the conference id and the default number.
 *
 * jitsi-meet's source is not part of this repository. The test loads it, unmodified, from
 * JITSI_MEET_SRC, or else from shared/peers/jitsi-meet beside the checkout: a directory
 * laid out as the jitsi-meet repository (jitsi/jitsi-meet, Apache-2.0, copyright 8x8),
 * holding at least the files above. Without it the test is skipped, saying so.
 * The modules functions.ts imports for features other than dial-in (redux state, i18n,
 * recording, …) are replaced by stand-ins below; none of them is on the path tested.
 */
import { afterAll, beforeAll, describe, expect, mock, test } from "bun:test";
import { existsSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { createApp } from "../../src/app";
import { addPhoneNumber, setDefaultPhoneNumber } from "../../src/modules/mapper/service";
import { newAccount } from "../helpers";

const HERE = dirname(fileURLToPath(import.meta.url));
const JITSI_MEET = process.env.JITSI_MEET_SRC ?? join(HERE, "..", "..", "..", "shared", "peers", "jitsi-meet");
const INVITE = join(JITSI_MEET, "react", "features", "invite");
const present = existsSync(join(INVITE, "functions.ts")) && existsSync(join(INVITE, "_utils.ts"));
if (!present) console.warn(`dial-in test skipped: no jitsi-meet source at ${JITSI_MEET} (set JITSI_MEET_SRC)`);

/** A module specifier for mock.module: relative to this file, which is how Bun matches a path that does not exist. */
const near = (path: string) => {
  const rel = relative(HERE, path);
  return rel.startsWith(".") ? rel : `./${rel}`;
};

const notOnTheDialInPath = (name: string) => () => {
  throw new Error(`${name} is a stand-in: the dial-in path does not call it`);
};

/** What functions.ts imports besides the dial-in modules, each a stand-in that is never called. */
const STAND_INS: Record<string, Record<string, unknown>> = {
  "app/types": { IReduxState: undefined },
  "base/app/types": { IStateful: undefined },
  "base/conference/functions": { getRoomName: notOnTheDialInPath("getRoomName") },
  "base/connection/functions": { getInviteURL: notOnTheDialInPath("getInviteURL") },
  "base/environment/utils": { isIosMobileBrowser: notOnTheDialInPath("isIosMobileBrowser") },
  "base/i18n/i18next": { default: { t: notOnTheDialInPath("i18next.t") } },
  "base/jwt/functions": { isJwtFeatureEnabled: notOnTheDialInPath("isJwtFeatureEnabled") },
  "base/lib-jitsi-meet": { JitsiRecordingConstants: {} },
  "base/participants/functions": {
    getLocalParticipant: notOnTheDialInPath("getLocalParticipant"),
    isLocalParticipantModerator: notOnTheDialInPath("isLocalParticipantModerator"),
  },
  "base/redux/functions": { toState: notOnTheDialInPath("toState") },
  "base/util/parseURLParams": { parseURLParams: notOnTheDialInPath("parseURLParams") },
  "base/util/uri": {
    StatusCode: {},
    appendURLParam: notOnTheDialInPath("appendURLParam"),
    parseURIString: notOnTheDialInPath("parseURIString"),
  },
  "jaas/functions": { isVpaasMeeting: notOnTheDialInPath("isVpaasMeeting") },
  "recording/functions": { getActiveSession: notOnTheDialInPath("getActiveSession") },
  "invite/constants": { DIAL_IN_INFO_PAGE_PATH_NAME: "static/dialInInfo.html", INVITE_TYPES: {}, SIP_ADDRESS_REGEX: /^$/, UPGRADE_OPTIONS_TEXT: "" },
  "invite/logger": { default: { error: () => {}, warn: () => {}, info: () => {} } },
  "invite/types": { IInvitee: undefined },
};

interface DialIn {
  getDialInConferenceID(baseUrl: string, roomName: string, mucURL: string, url: URL): Promise<{ conference: string | false; id: number; message: string }>;
  getDialInNumbers(url: string, roomName: string, mucURL: string): Promise<unknown>;
  _formatConferenceIDPin(conferenceID: unknown): string;
  _getDefaultPhoneNumber(numbers: unknown): string | null;
  hasMultipleNumbers(numbers: unknown): boolean;
  shouldDisplayDialIn(dialIn: unknown): boolean;
}

const MUC = "conference.meet.test";

describe.skipIf(!present)("jitsi-meet's own dial-in code reading Parley", () => {
  let jitsi: DialIn;
  let parley: ReturnType<ReturnType<typeof createApp>["listen"]>;
  let base: string;

  beforeAll(async () => {
    for (const [module, exports] of Object.entries(STAND_INS)) mock.module(near(join(JITSI_MEET, "react", "features", module)), () => exports);
    // httpUtils imports base64-js for helpers the dial-in path does not use.
    mock.module("base64-js", () => ({ default: { fromByteArray: notOnTheDialInPath("fromByteArray"), toByteArray: notOnTheDialInPath("toByteArray") } }));
    jitsi = { ...(await import(join(INVITE, "_utils.ts"))), ...(await import(join(INVITE, "functions.ts"))) } as DialIn;
    parley = createApp().listen({ hostname: "127.0.0.1", port: 0 });
    base = `http://127.0.0.1:${parley.server!.port}/api/v1/conference-mapper`;
  });

  afterAll(() => parley?.stop(true));

  test("the conference id: jitsi-meet's dialInConfCodeUrl request gets a conference and an id it accepts", async () => {
    const { accountId } = await newAccount();
    const dialInConfCodeUrl = `${base}/${accountId}/conferenceMapper`;
    const page = new URL("https://meet.test/standup?jwt=x#config.startSilent=true");
    const answer = await jitsi.getDialInConferenceID(dialInConfCodeUrl, "standup", MUC, page);
    // jitsi-meet rejects the answer when `!conference || !id`.
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
    // jitsi-meet's room name for "Design Review" is design%20review (getBackendSafeRoomName).
    const answer = await jitsi.getDialInConferenceID(dialInConfCodeUrl, "design%20review", MUC, page);
    expect(answer.conference).toBe(`design%20review@${MUC}`);
    const typed = await fetch(`${dialInConfCodeUrl}?conference=${encodeURIComponent(`Design Review@${MUC}`)}`).then((r) => r.json());
    expect(typed.id).toBe(answer.id);
  });

  test("the numbers: jitsi-meet shows the operator's default, not the first country", async () => {
    const { accountId } = await newAccount();
    await addPhoneNumber(accountId, { countryCode: "DE", formattedNumber: "0800 123 4567", tollFree: true });
    const us = await addPhoneNumber(accountId, { countryCode: "US", formattedNumber: "+1 512 555 0100", tollFree: false });
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
    const { id } = await jitsi.getDialInConferenceID(dialInConfCodeUrl, "standup", MUC, new URL("https://meet.test/standup"));
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
