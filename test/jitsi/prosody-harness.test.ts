/**
 * The Prosody harness itself in token mode: jitsi-meet's unmodified token modules load on
 * Debian's Lua 5.4 (basexx from Debian's 5.2 files, luaossl, cjson), a WebSocket client with
 * `?token=` logs in and joins the room its token names, and the MUC refuses another room.
 * Tokens here are HS256 with Prosody's `app_secret`, so this needs nothing but Prosody.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { SignJWT } from "jose";
import { DOMAIN, type Prosody, skipWithout, startProsody } from "../support/prosody";

const skipped = skipWithout("the Prosody harness in token mode", { tokenAuth: true });
const APP_ID = "parley-harness";
const SECRET = crypto.randomUUID();
let prosody: Prosody;

const token = (room: string) =>
  new SignJWT({ room, context: { user: { id: "u1", name: "Harness" } } })
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .setIssuer(APP_ID)
    .setAudience("jitsi")
    .setSubject(DOMAIN)
    .setExpirationTime("10m")
    .sign(new TextEncoder().encode(SECRET));

beforeAll(async () => {
  if (skipped) return;
  prosody = await startProsody({
    parleyUrl: "http://127.0.0.1:9",
    apiKey: "unused",
    tokenAuth: { virtualHostLines: [`app_id = "${APP_ID}"`, `app_secret = "${SECRET}"`] },
  });
});

afterAll(() => prosody?.stop());

test.skipIf(skipped)("a token user joins the room of its token; another room and no token are refused", async () => {
  try {
    const guest = await prosody.participant({ token: await token("hello") });
    expect(await guest.open("hello")).toEqual({ ok: true });
    expect(await guest.open("elsewhere")).toMatchObject({ ok: false, stage: "muc" });
    await expect(prosody.participant()).rejects.toThrow();
    expect(prosody.log()).not.toContain("not found");
  } catch (error) {
    console.error(prosody.log().slice(-6000));
    throw error;
  }
});
