/**
 * Parley's media tokens against Jitsi's own token verification: Debian's Prosody 0.12 with
 * jitsi-meet's `mod_auth_token` (authentication = "token"), `mod_jitsi_session` and, on the
 * MUC, `mod_token_verification`, unmodified from jitsi-meet's plugin folder
 * (JITSI_PROSODY_PLUGINS, test/support/prosody.ts; skipped, saying so, without it),
 * configured with the lines docs/jitsi.md gives operators. Prosody fetches each token's
 * public key from Parley's ASAP key route and checks iss, aud, the room claim and (domain
 * verification on) the sub, as a Jitsi deployment does. A participant logs in over
 * WebSocket with `?token=`, asks the focus stand-in for the conference (it creates the
 * room, as Jicofo does: a token user may join only a room that exists) and joins it.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { client } from "@xmpp/client";
import { createApp } from "../../src/process/app";
import { revokeSigningKey, setJitsiDomain } from "../../src/modules/accounts/service";
import { newAccount, tokenFor } from "../helpers";
import { DOMAIN, documentedLines, MUC_DOMAIN, type Prosody, skipWithout, startProsody } from "../support/prosody";
import { eventually } from "../support/wait";

const skipped = skipWithout("Jitsi's token auth against Parley", { tokenAuth: true });
let parley: ReturnType<ReturnType<typeof createApp>["listen"]>;
let parleyUrl: string;
let prosody: Prosody;
let account: Awaited<ReturnType<typeof newAccount>>;

async function mediaToken(apiKey: string, room?: string, exp?: string) {
  const answer = await fetch(`${parleyUrl}/api/v1/misc/generate-token`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      apiKey,
      scope: "media",
      user: { id: "u1", name: "Ada" },
      ...(room && { room }),
      ...(exp && { exp }),
    }),
  });
  const body = (await answer.json()) as { token: string };
  if (answer.status !== 200) throw new Error(`token request failed: ${answer.status} ${JSON.stringify(body)}`);
  return body.token;
}

/**
 * The SASL condition of a refused login, or "accepted". A bare client rather than the
 * harness's participant: a refused login is the expected outcome here, and the client is
 * stopped at once so it does not try again.
 */
async function loginOutcome(token: string): Promise<string> {
  const entity = client({ service: `${prosody.websocketUrl}?token=${encodeURIComponent(token)}`, domain: DOMAIN });
  entity.on("error", () => {});
  try {
    await Promise.race([
      entity.start(),
      Bun.sleep(10_000).then(() => {
        throw new Error("no answer to the login in 10 s");
      }),
    ]);
    return "accepted";
  } catch (error) {
    return (error as { condition?: string }).condition ?? String(error);
  } finally {
    await Promise.race([entity.stop().catch(() => {}), Bun.sleep(2_000)]);
  }
}

/** Logs in with the token and opens the room as jitsi-meet does: "joined", or why not. */
async function openWith(token: string, room: string): Promise<string> {
  const participant = await prosody.participant({ token });
  const opened = await participant.open(room);
  return opened.ok ? "joined" : opened.stage === "muc" ? opened.condition : `focus refused: ${opened.text}`;
}

/** Prosody's own reason for a refusal, from its log: the refusal must be the one the test means. */
const logged = (reason: string) => eventually(() => prosody.log().includes(reason), 5_000);

beforeAll(async () => {
  if (skipped) return;
  parley = createApp().listen({ hostname: "127.0.0.1", port: 0 });
  parleyUrl = `http://127.0.0.1:${parley.server!.port}`;
  account = await newAccount("RS256");
  await setJitsiDomain(account.accountId, DOMAIN);
  prosody = await startProsody({
    parleyUrl,
    apiKey: account.apiKey,
    tokenAuth: { virtualHostLines: documentedLines("token", parleyUrl, account.apiKey).split("\n") },
  });
}, 30_000);

afterAll(async () => {
  await prosody?.stop();
  parley?.stop(true);
});

describe.skipIf(skipped)("Jitsi's Prosody token auth with Parley media tokens", () => {
  test("a media token for the room joins it; a room typed with a space is the one Jitsi names", async () => {
    expect(await openWith(await mediaToken(account.apiKey, "standup"), "standup")).toBe("joined");
    expect(await openWith(await mediaToken(account.apiKey, "Design Review"), "design%20review")).toBe("joined");
  });

  test("a token for any room (*) joins any room, and one with sub * on the domain", async () => {
    expect(await openWith(await mediaToken(account.apiKey), "standup")).toBe("joined");
    const wildcard = await newAccount("RS256");
    expect(await openWith(await mediaToken(wildcard.apiKey, "standup"), "standup")).toBe("joined");
  });

  test("another room's token logs in but may not join", async () => {
    expect(await openWith(await mediaToken(account.apiKey, "retro"), "standup")).toContain("not-allowed");
    expect(await logged(`not allowed to join: standup@${MUC_DOMAIN}/`)).toBe(true);
  });

  test("a token for another Jitsi domain may not join (domain verification)", async () => {
    const elsewhere = await newAccount("RS256");
    await setJitsiDomain(elsewhere.accountId, "meet.elsewhere.example");
    const before = prosody.log().split("not allowed to join").length;
    expect(await openWith(await mediaToken(elsewhere.apiKey, "standup"), "standup")).toContain("not-allowed");
    expect(await eventually(() => prosody.log().split("not allowed to join").length > before, 5_000)).toBe(true);
  });

  test("an expired media token is refused at login", async () => {
    const token = await mediaToken(account.apiKey, "standup", "1s");
    await Bun.sleep(2_100);
    expect(await loginOutcome(token)).toBe("not-allowed");
    expect(await logged("reason:Not acceptable by exp")).toBe(true);
  });

  test("a messaging-scoped token is refused at login", async () => {
    expect(await loginOutcome(await tokenFor(account.apiKey, { id: "u1" }, "messaging"))).toBe("not-allowed");
    expect(await logged("reason:invalid 'aud' claim")).toBe(true);
  });

  test("a token of a revoked key is refused: Parley no longer serves the key", async () => {
    const leaked = await newAccount("RS256");
    await setJitsiDomain(leaked.accountId, DOMAIN);
    const token = await mediaToken(leaked.apiKey, "standup");
    await revokeSigningKey(leaked.kid);
    expect(await loginOutcome(token)).toBe("not-allowed");
    expect(await logged("reason:could not obtain public key")).toBe(true);
    // The account's next key works.
    expect(await openWith(await mediaToken(leaked.apiKey, "standup"), "standup")).toBe("joined");
  });
});
