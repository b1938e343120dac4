import { beforeAll, describe, expect, test } from "bun:test";
import { createPublicKey } from "node:crypto";
import { createVerifier } from "fast-jwt";
import { SignJWT, base64url } from "jose";
import type { AppError } from "../../src/core/errors";
import { ERROR_STATUS } from "../../src/http/errors";
import { createApiKey, revokeApiKey, rotateSigningKey } from "../../src/modules/accounts/service";
import { call, newAccount, tokenFor } from "../helpers";

const ROUTE = "/api/v1/misc/generate-token";

/** Verifies with fast-jwt against the served JWKS, independently of the library that signed. */
async function verifyIndependently(token: string, options: Record<string, unknown> = {}) {
  const jwks = (await call("GET", "/.well-known/jwks.json")).body as { keys: Array<Record<string, string>> };
  const verify = createVerifier({
    key: async ({ header }: { header: Record<string, any> }) => {
      const jwk = jwks.keys.find((key) => key.kid === header.kid);
      if (!jwk) throw new Error(`kid ${header.kid} not in JWKS`);
      return createPublicKey({ key: jwk as never, format: "jwk" }).export({ type: "spki", format: "pem" }) as string;
    },
    ...options,
  });
  return verify(token) as Promise<Record<string, any>>;
}

/** A service's refusal as the HTTP pipeline answers it: the error's code and that code's status. */
function asAnswered(refused: Promise<unknown>): Promise<unknown> {
  return refused.catch((error: AppError) => {
    throw { code: error.code, status: ERROR_STATUS[error.code] };
  });
}

function decode(token: string) {
  const [header, payload] = token.split(".");
  return {
    header: JSON.parse(new TextDecoder().decode(base64url.decode(header!))),
    payload: JSON.parse(new TextDecoder().decode(base64url.decode(payload!))),
  };
}

describe("POST /api/v1/misc/generate-token", () => {
  let rsa: Awaited<ReturnType<typeof newAccount>>;
  let ec: Awaited<ReturnType<typeof newAccount>>;
  let ed: Awaited<ReturnType<typeof newAccount>>;

  beforeAll(async () => {
    [rsa, ec, ed] = await Promise.all([newAccount("RS256"), newAccount("ES256"), newAccount("EdDSA")]);
  });

  for (const [name, pick, alg] of [
    ["RS256", () => rsa, "RS256"],
    ["ES256", () => ec, "ES256"],
    ["EdDSA", () => ed, "EdDSA"],
  ] as const) {
    test(`a ${name} token verifies against the JWKS with an independent library`, async () => {
      const account = pick();
      const user = {
        id: "u-1",
        name: "Ada",
        email: "ada@example.com",
        avatar: "https://example.com/a.png",
        moderator: true,
      };
      const answer = await call("POST", ROUTE, { body: { apiKey: account.apiKey, user, scope: "messaging" } });
      expect(answer.status).toBe(200);
      const claims = await verifyIndependently(answer.body.token, { allowedAud: "messaging", allowedIss: "parley" });
      expect(decode(answer.body.token).header).toMatchObject({ alg, kid: account.kid, typ: "JWT" });
      expect(claims.sub).toBe(account.accountId);
      expect(claims.context).toEqual({ user, group: account.accountId });
      expect(claims.exp - claims.iat).toBe(24 * 3600);
      expect(claims.nbf).toBeUndefined();
    });
  }

  test("accepts the API key as a Bearer header instead of in the body", async () => {
    const answer = await call("POST", ROUTE, {
      body: { user: { id: "bob" } },
      headers: { authorization: `Bearer ${ed.apiKey}` },
    });
    expect(answer.status).toBe(200);
    expect(decode(answer.body.token).payload.context.user.id).toBe("bob");
  });

  test("generates a distinct user id when user or user.id is missing", async () => {
    const first = await call("POST", ROUTE, { body: { apiKey: ed.apiKey } });
    const second = await call("POST", ROUTE, { body: { apiKey: ed.apiKey, user: { name: "Nameless" } } });
    const firstId = decode(first.body.token).payload.context.user.id;
    const secondUser = decode(second.body.token).payload.context.user;
    expect(firstId).toMatch(/^usr_[0-9a-f]{20}$/);
    expect(secondUser.id).toMatch(/^usr_[0-9a-f]{20}$/);
    expect(secondUser.id).not.toBe(firstId);
    expect(secondUser.name).toBe("Nameless");
  });

  test.each([
    ["24 hours", 86_400],
    ["2h", 7_200],
    ["90 minutes", 5_400],
    ["1 day", 86_400],
    ["3", 10_800],
    [3, 10_800],
  ])("exp %p lasts %d seconds", async (exp, seconds) => {
    const answer = await call("POST", ROUTE, { body: { apiKey: ed.apiKey, exp } });
    expect(answer.status).toBe(200);
    const { payload } = decode(answer.body.token);
    expect(payload.exp - payload.iat).toBe(seconds);
  });

  test("nbf delays validity; an empty nbf means none", async () => {
    const delayed = decode(
      (await call("POST", ROUTE, { body: { apiKey: ed.apiKey, nbf: "1 hour" } })).body.token,
    ).payload;
    expect(delayed.nbf - delayed.iat).toBe(3600);
    const immediate = decode((await call("POST", ROUTE, { body: { apiKey: ed.apiKey, nbf: "" } })).body.token).payload;
    expect(immediate.nbf).toBeUndefined();
  });

  test.each([
    ["messaging", "messaging"],
    ["media", "media"],
    ["parley", "parley"],
    ["", ["messaging", "media", "parley"]],
  ])("scope %p gives audience %p", async (scope, aud) => {
    const { payload } = decode((await call("POST", ROUTE, { body: { apiKey: rsa.apiKey, scope } })).body.token);
    expect(payload.aud).toEqual(aud);
    expect(payload.room === "*").toBe(scope === "media" || scope === "");
  });

  test.each([
    [{ exp: "-1 hours" }, 422, "exp"],
    [{ exp: "0" }, 422, "exp"],
    [{ exp: "soon" }, 422, "exp"],
    [{ exp: "10 fortnights" }, 422, "exp"],
    [{ exp: "31 days" }, 422, "exp"],
    [{ nbf: "2 days", exp: "1 day" }, 422, "nbf"],
    [{ nbf: "whenever" }, 422, "nbf"],
    [{ scope: "admin" }, 422, "scope"],
    [{ user: { email: "not-an-email" } }, 400, "user.email"],
    [{ user: { moderator: "yes" } }, 400, "user.moderator"],
    [{ user: "alice" }, 400, "user"],
  ])("rejects %p with %d naming %s", async (fields, status, field) => {
    const answer = await call("POST", ROUTE, { body: { apiKey: ed.apiKey, ...fields } });
    expect(answer.status).toBe(status);
    expect(answer.body.error.message).toContain(field);
  });

  test("malformed JSON is a 400 in the error shape", async () => {
    const answer = await call("POST", ROUTE, { raw: "{not json", headers: { "content-type": "application/json" } });
    expect(answer.status).toBe(400);
    expect(answer.body.error.code).toBe("invalid_json");
  });

  test("unknown, missing and revoked API keys fail with 401", async () => {
    const unknown = await call("POST", ROUTE, { body: { apiKey: "prl_nope" } });
    expect(unknown.status).toBe(401);
    expect(unknown.body.error).toEqual({
      code: "invalid_api_key",
      message: "failed to generate token: unknown or revoked API key",
    });

    const missing = await call("POST", ROUTE, { body: {} });
    expect(missing.status).toBe(401);

    const account = await newAccount("EdDSA");
    const second = await createApiKey(account.accountId, "second");
    expect((await call("POST", ROUTE, { body: { apiKey: second.apiKey } })).status).toBe(200);
    await revokeApiKey(second.id);
    expect((await call("POST", ROUTE, { body: { apiKey: second.apiKey } })).status).toBe(401);
    expect((await call("POST", ROUTE, { body: { apiKey: account.apiKey } })).status).toBe(200);
  });

  test("rotation: new tokens use the new kid, tokens of the old kid keep verifying", async () => {
    const account = await newAccount("RS256");
    const before = await tokenFor(account.apiKey);
    const newKid = await rotateSigningKey(account.accountId, "ES256");
    const after = await tokenFor(account.apiKey);
    expect(decode(before).header.kid).toBe(account.kid);
    expect(decode(after).header).toMatchObject({ kid: newKid, alg: "ES256" });
    await verifyIndependently(before);
    await verifyIndependently(after);
    const kids = (await call("GET", "/.well-known/jwks.json")).body.keys.map((key: { kid: string }) => key.kid);
    expect(kids).toContain(account.kid);
    expect(kids).toContain(newKid);
  });
});

describe("media tokens, for Jitsi's Prosody token auth", () => {
  const { revokeSigningKey, setJitsiDomain } =
    require("../../src/modules/accounts/service") as typeof import("../../src/modules/accounts/service");
  const { verifyAccessToken } =
    require("../../src/modules/auth/access-token") as typeof import("../../src/modules/auth/access-token");
  const sha256hex = (text: string) => new Bun.CryptoHasher("sha256").update(text).digest("hex");
  const asapKey = (kid: string) => call("GET", `/api/v1/jitsi/asap-keys/${sha256hex(kid)}.pem`);

  test("sub is the account's Jitsi domain (* until set), the account in context.group, room * by default", async () => {
    const account = await newAccount("RS256");
    const first = decode(
      (await call("POST", ROUTE, { body: { apiKey: account.apiKey, scope: "media" } })).body.token,
    ).payload;
    expect(first).toMatchObject({
      iss: "parley",
      aud: "media",
      sub: "*",
      room: "*",
      context: { group: account.accountId },
    });
    await setJitsiDomain(account.accountId, "Meet.Example.com");
    const answer = await call("POST", ROUTE, {
      body: { apiKey: account.apiKey, scope: "media", room: "Design Review" },
    });
    expect(answer.status).toBe(200);
    expect(decode(answer.body.token).payload).toMatchObject({ sub: "meet.example.com", room: "design%20review" });
    // Parley itself still takes it as the account's media token.
    expect(await verifyAccessToken(answer.body.token, "media")).toMatchObject({
      accountId: account.accountId,
      audiences: ["media"],
    });
    // Other scopes keep the account id as sub.
    const messaging = decode(
      (await call("POST", ROUTE, { body: { apiKey: account.apiKey, scope: "messaging" } })).body.token,
    ).payload;
    expect(messaging.sub).toBe(account.accountId);
    await expect(asAnswered(setJitsiDomain(account.accountId, "not a domain!"))).rejects.toMatchObject({ status: 422 });
  });

  test("a room belongs to media tokens only", async () => {
    const account = await newAccount("RS256");
    for (const scope of ["messaging", ""]) {
      const answer = await call("POST", ROUTE, { body: { apiKey: account.apiKey, scope, room: "standup" } });
      expect(answer.status).toBe(422);
      expect(answer.body.error.message).toContain("room");
    }
  });

  test.each(["ES256", "EdDSA"] as const)(
    "a %s account gets a 422 naming RS256 for a media token, and its other tokens still",
    async (alg) => {
      const account = await newAccount(alg);
      const refused = await call("POST", ROUTE, { body: { apiKey: account.apiKey, scope: "media" } });
      expect(refused.status).toBe(422);
      expect(refused.body.error.code).toBe("validation_failed");
      expect(refused.body.error.message).toContain("RS256");
      expect((await call("POST", ROUTE, { body: { apiKey: account.apiKey, scope: "messaging" } })).status).toBe(200);
    },
  );

  test("the ASAP key route serves current and rotated keys as PEM at sha256(kid).pem, no credential", async () => {
    const account = await newAccount("RS256");
    const served = await asapKey(account.kid);
    expect(served.status).toBe(200);
    expect(served.headers.get("content-type")).toContain("application/x-pem-file");
    const jwk = (await call("GET", "/.well-known/jwks.json")).body.keys.find(
      (key: { kid: string }) => key.kid === account.kid,
    );
    expect(served.body).toBe(createPublicKey({ key: jwk, format: "jwk" }).export({ type: "spki", format: "pem" }));
    // A token it signed verifies with the served PEM (independently of Parley's verifier).
    const token = await tokenFor(account.apiKey, { id: "pem" }, "media");
    const claims = createVerifier({ key: served.body as string, algorithms: ["RS256"] })(token) as Record<
      string,
      unknown
    >;
    expect(claims.aud).toBe("media");

    const newKid = await rotateSigningKey(account.accountId);
    expect((await asapKey(account.kid)).status).toBe(200);
    expect((await asapKey(newKid)).status).toBe(200);
    for (const path of [
      sha256hex("no-such-kid"),
      `${sha256hex(account.kid)}.pub`,
      "..%2f..%2fetc%2fpasswd",
      account.kid,
    ]) {
      const missing = await call("GET", `/api/v1/jitsi/asap-keys/${path}`);
      expect(missing.status).toBe(404);
      expect(missing.body.error.code).toBe("not_found");
    }
  });

  test("a revoked key is no longer served and its tokens stop verifying; a current key is replaced", async () => {
    const account = await newAccount("RS256");
    const token = await tokenFor(account.apiKey, { id: "leak" }, "media");
    await verifyAccessToken(token, "media");
    const { newKid } = await revokeSigningKey(account.kid);
    expect(newKid).toBeString();
    expect((await asapKey(account.kid)).status).toBe(404);
    await expect(verifyAccessToken(token, "media")).rejects.toMatchObject({ code: "invalid_token" });
    const jwks = (await call("GET", "/.well-known/jwks.json")).body.keys.map((key: { kid: string }) => key.kid);
    expect(jwks).not.toContain(account.kid);
    const next = await tokenFor(account.apiKey, { id: "after" }, "media");
    expect(decode(next).header.kid).toBe(newKid);
    expect((await asapKey(newKid!)).status).toBe(200);
    await expect(revokeSigningKey("no-such-kid")).rejects.toMatchObject({ code: "not_found" });
  });
});

describe("bearer token verification", () => {
  const { verifyAccessToken } =
    require("../../src/modules/auth/access-token") as typeof import("../../src/modules/auth/access-token");

  test("a valid token yields its account and user", async () => {
    const account = await newAccount();
    const verified = await verifyAccessToken(await tokenFor(account.apiKey, { id: "carol" }, "messaging"), "messaging");
    expect(verified).toMatchObject({ accountId: account.accountId, user: { id: "carol" }, audiences: ["messaging"] });
  });

  test("expired tokens are token_expired, wrong scope forbidden", async () => {
    const account = await newAccount("RS256");
    const media = await tokenFor(account.apiKey, { id: "dave" }, "media");
    await expect(asAnswered(verifyAccessToken(media, "messaging"))).rejects.toMatchObject({
      code: "forbidden",
      status: 403,
    });

    const { currentSigningKey } = await import("../../src/modules/accounts/signing-keys");
    const key = await currentSigningKey(account.accountId);
    const expired = await new SignJWT({ context: { user: { id: "dave" }, group: account.accountId } })
      .setProtectedHeader({ alg: key.algorithm, kid: key.kid })
      .setIssuer("parley")
      .setSubject(account.accountId)
      .setAudience("messaging")
      .setIssuedAt(Math.floor(Date.now() / 1000) - 7200)
      .setExpirationTime(Math.floor(Date.now() / 1000) - 3600)
      .sign(key.privateKey);
    await expect(asAnswered(verifyAccessToken(expired, "messaging"))).rejects.toMatchObject({
      code: "token_expired",
      status: 401,
    });
  });

  test("tampered, alg none and HS256-with-the-public-key tokens are invalid", async () => {
    const account = await newAccount("RS256");
    const token = await tokenFor(account.apiKey, { id: "eve" }, "messaging");
    const [header, payload, signature] = token.split(".");
    const claims = JSON.parse(new TextDecoder().decode(base64url.decode(payload!)));
    const forged = base64url.encode(
      JSON.stringify({ ...claims, context: { ...claims.context, user: { id: "admin" } } }),
    );
    await expect(verifyAccessToken(`${header}.${forged}.${signature}`)).rejects.toMatchObject({
      code: "invalid_token",
    });

    const none = base64url.encode(JSON.stringify({ alg: "none", kid: account.kid }));
    await expect(verifyAccessToken(`${none}.${payload}.`)).rejects.toMatchObject({ code: "invalid_token" });

    const jwk = (await call("GET", "/.well-known/jwks.json")).body.keys.find(
      (key: { kid: string }) => key.kid === account.kid,
    );
    const publicPem = createPublicKey({ key: jwk, format: "jwk" }).export({ type: "spki", format: "pem" }) as string;
    const hs = await new SignJWT(claims)
      .setProtectedHeader({ alg: "HS256", kid: account.kid })
      .sign(new TextEncoder().encode(publicPem));
    await expect(verifyAccessToken(hs)).rejects.toMatchObject({ code: "invalid_token" });
  });
});
