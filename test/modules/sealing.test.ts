import { describe, expect, test } from "bun:test";
import { lstatSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { eq } from "drizzle-orm";
import { overrideConfig } from "../../src/core/config";
import { db } from "../../src/db/client";
import { openPrivateKey, type SealedKey, sealPrivateKey } from "../../src/modules/accounts/sealing";
import { sealPlainSigningKeys } from "../../src/modules/accounts/service";
import { createEndpoint, sealPlainSecrets } from "../../src/modules/webhooks/service";
import { signingKeys, webhookEndpoints } from "../../drizzle/schema";
import { call, newAccount } from "../helpers";

describe("private signing keys at rest", () => {
  test("are stored sealed: no private member in the row, and tokens still sign and verify", async () => {
    const account = await newAccount("ES256");
    const [row] = await db.select().from(signingKeys).where(eq(signingKeys.kid, account.kid));
    const stored = row!.privateJwk as SealedKey;
    expect(stored.sealed).toBe("A256GCM");
    expect(JSON.stringify(stored)).not.toContain('"d"');
    expect(openPrivateKey(stored)).toMatchObject({ kty: "EC", crv: "P-256", kid: account.kid, d: expect.any(String) });
    expect((await call("POST", "/api/v1/misc/generate-token", { body: { apiKey: account.apiKey } })).status).toBe(200);
  });

  test("each sealing uses a fresh nonce, and a tampered sealed key is refused", () => {
    const jwk = { kty: "OKP", crv: "Ed25519", x: "x", d: "secret-part" };
    const first = sealPrivateKey(jwk) as SealedKey;
    const second = sealPrivateKey(jwk) as SealedKey;
    expect(first.iv).not.toBe(second.iv);
    expect(first.data).not.toBe(second.data);
    const flipped = Buffer.from(first.data, "base64url");
    flipped[0]! ^= 1;
    expect(() => openPrivateKey({ ...first, data: flipped.toString("base64url") })).toThrow();
  });

  test("a key an older Parley stored in plain text is read as it is", () => {
    const plain = { kty: "OKP", crv: "Ed25519", x: "x", d: "d" };
    expect(openPrivateKey(plain)).toEqual(plain);
  });

  test("without SIGNING_KEY_SECRET, keys are sealed under a secret generated once into DATA_DIR (0600)", () => {
    const dataDir = mkdtempSync(join(tmpdir(), "parley-sealing-"));
    const restore = overrideConfig({ tokens: { signingKeySecret: undefined }, database: { dataDir } });
    try {
      const jwk = { kty: "OKP", crv: "Ed25519", x: "x", d: "secret-part" };
      const stored = sealPrivateKey(jwk);
      expect(stored.sealed).toBe("A256GCM");
      expect(JSON.stringify(stored)).not.toContain("secret-part");
      const file = join(dataDir, "sealing-key");
      expect(lstatSync(file).mode & 0o777).toBe(0o600);
      const secret = readFileSync(file, "utf8");
      expect(openPrivateKey(sealPrivateKey(jwk))).toEqual(jwk);
      expect(readFileSync(file, "utf8")).toBe(secret);
      // The file's secret is what SIGNING_KEY_SECRET would be: an operator may move it there.
      overrideConfig({ tokens: { signingKeySecret: secret } });
      expect(openPrivateKey(stored)).toEqual(jwk);
    } finally {
      restore();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("a key sealed under another secret is refused with what to do", () => {
    const sealed = sealPrivateKey({ kty: "OKP", crv: "Ed25519", x: "x", d: "d" });
    const restore = overrideConfig({ tokens: { signingKeySecret: "another-secret" } });
    try {
      expect(() => openPrivateKey(sealed)).toThrow(/sealed with another key than SIGNING_KEY_SECRET/);
    } finally {
      restore();
    }
  });

  test("rows stored in plain text are sealed once, by one of two starts sealing at the same moment", async () => {
    const account = await newAccount("RS256");
    const [row] = await db.select().from(signingKeys).where(eq(signingKeys.kid, account.kid));
    const plainKey = openPrivateKey(row!.privateJwk);
    await db.update(signingKeys).set({ privateJwk: plainKey }).where(eq(signingKeys.kid, account.kid));
    const { endpoint, secret } = await createEndpoint(account.accountId, { url: "http://127.0.0.1:9/hook" });
    await db.update(webhookEndpoints).set({ secret: { secret } }).where(eq(webhookEndpoints.id, endpoint.id));

    const seal = () => db.transaction(async (tx) => (await sealPlainSigningKeys(tx)) + (await sealPlainSecrets(tx)));
    const [first, second] = await Promise.all([seal(), seal()]);
    expect(first + second).toBe(2);
    expect(await seal()).toBe(0);
    const [sealedKey] = await db.select().from(signingKeys).where(eq(signingKeys.kid, account.kid));
    expect(openPrivateKey(sealedKey!.privateJwk)).toEqual(plainKey);
    const [hook] = await db.select().from(webhookEndpoints).where(eq(webhookEndpoints.id, endpoint.id));
    expect(hook!.secret.sealed).toBe("A256GCM");
    expect(openPrivateKey(hook!.secret)).toEqual({ secret });
  });
});
