import { describe, expect, test } from "bun:test";
import { eq } from "drizzle-orm";
import { db } from "../../src/db/client";
import { openPrivateKey, type SealedKey, sealPrivateKey } from "../../src/modules/accounts/sealing";
import { signingKeys } from "../../drizzle/schema";
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

  test("a key stored before the secret was set is read as it is", () => {
    const plain = { kty: "OKP", crv: "Ed25519", x: "x", d: "d" };
    expect(openPrivateKey(plain)).toEqual(plain);
  });
});
