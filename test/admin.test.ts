/** The admin command line as an operator runs it: output, exit codes, and effect on the API. */
import { beforeAll, describe, expect, test } from "bun:test";
import { listenForInvalidations } from "../src/modules/accounts/service";
import { call } from "./helpers";
import { eventually } from "./support/wait";

const entry = new URL("../src/admin.ts", import.meta.url).pathname;

function admin(...args: string[]) {
  const result = Bun.spawnSync([process.execPath, entry, ...args], { env: { ...process.env, LOG_LEVEL: "silent" } });
  return { code: result.exitCode, out: result.stdout.toString(), err: result.stderr.toString() };
}


describe("bun run admin", () => {
  // As in every API process: cached keys are dropped when the admin command broadcasts.
  beforeAll(() => listenForInvalidations());

  test("create-account prints the key once; list never shows it; revoke and rotate take effect", async () => {
    const created = admin("create-account", "Acme", "--alg", "ES256");
    expect(created.code).toBe(0);
    const accountId = /account\s+(acc_\w+)/.exec(created.out)![1]!;
    const apiKey = /api key\s+(prl_\w+)/.exec(created.out)![1]!;
    expect((await call("POST", "/api/v1/misc/generate-token", { body: { apiKey } })).status).toBe(200);

    const second = admin("create-key", accountId, "--label", "ci");
    expect(second.code).toBe(0);
    const secondKey = /(prl_\w+)/.exec(second.out)![1]!;
    const secondId = /#(\d+)/.exec(second.out)![1]!;

    const listed = admin("list-accounts", "--json");
    expect(listed.code).toBe(0);
    expect(listed.out).not.toContain(apiKey);
    expect(listed.out).not.toContain(secondKey);
    const account = JSON.parse(listed.out).find((row: { id: string }) => row.id === accountId);
    expect(account.apiKeys.map((key: { label: string }) => key.label)).toEqual(["default", "ci"]);

    // Used once so this process has it cached; the revocation must still reach it.
    expect((await call("POST", "/api/v1/misc/generate-token", { body: { apiKey: secondKey } })).status).toBe(200);
    expect(admin("revoke-key", secondId).code).toBe(0);
    const refused = async () => (await call("POST", "/api/v1/misc/generate-token", { body: { apiKey: secondKey } })).status === 401;
    expect(await eventually(refused)).toBe(true);
    expect(admin("revoke-key", secondId).code).toBe(1);

    const rotated = admin("rotate-key", accountId, "--alg", "EdDSA");
    expect(rotated.code).toBe(0);
    const signsWithEdDSA = async () => {
      const token = (await call("POST", "/api/v1/misc/generate-token", { body: { apiKey } })).body.token as string;
      return JSON.parse(atob(token.split(".")[0]!)).alg === "EdDSA";
    };
    expect(await eventually(signsWithEdDSA)).toBe(true);
  }, 30_000);

  test("misuse exits 2 with the usage; an unknown account exits 1", () => {
    expect(admin().code).toBe(2);
    expect(admin("frobnicate").code).toBe(2);
    expect(admin("create-account", "x", "--alg", "HS256").code).toBe(2);
    const unknown = admin("rotate-key", "acc_missing");
    expect(unknown.code).toBe(1);
    expect(unknown.err).toContain("no account acc_missing");
  }, 30_000);
});
