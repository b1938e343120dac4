import { beforeAll, describe, expect, test } from "bun:test";
import { config } from "../../src/core/config";
import {
  addPhoneNumber,
  conferenceForMapperId,
  dammCheckDigit,
  hasValidCheckDigit,
  listPhoneNumbers,
  mapperIdFor,
} from "../../src/modules/mapper/service";
import { call, newAccount } from "../helpers";
import { adminCli } from "../support/admin-cli";

const MAPPER = "/api/v1/conference-mapper/conferenceMapper";
const NUMBERS = "/api/v1/conference-mapper/phoneNumberList";

/** The id with its last digit typed wrong: one substituted digit, which the check digit always catches. */
function mistype(id: number): number {
  const digits = String(id);
  return Number(`${digits.slice(0, -1)}${(Number(digits.at(-1)) + 1) % 10}`);
}

/**
 * What jitsi-meet's dial-in page does with the two answers: it needs
 * `conference` and `id`, and an array is the new number format.
 */
function readAsJitsiMeet(mapping: any, numbers: any) {
  if (!mapping.conference || !mapping.id) throw new Error("jitsi-meet would show: no conference id");
  if (!Array.isArray(numbers)) throw new Error("jitsi-meet would read the legacy { numbers: {...} } format");
  return {
    pin: String(mapping.id),
    byCountry: Object.groupBy(
      numbers as Array<{ countryCode: string; formattedNumber: string; tollFree: boolean; default: boolean }>,
      (n) => n.countryCode,
    ),
  };
}

describe("mapper ids", () => {
  test("the Damm check digit matches the published example (572 → 4)", () => {
    expect(dammCheckDigit("572")).toBe(4);
    // 5724 checks, but is shorter than an id may be.
    expect(hasValidCheckDigit(5724)).toBe(false);
    expect(hasValidCheckDigit(Number(`123456${dammCheckDigit("123456")}`))).toBe(true);
  });

  test("ids have the configured length, a leading non-zero digit and a valid check digit", async () => {
    const { accountId } = await newAccount();
    const ids = await Promise.all(
      Array.from({ length: 20 }, (_, i) => mapperIdFor(accountId, `room-${i}@conference.example.com`)),
    );
    for (const id of ids) {
      expect(String(id)).toHaveLength(config.mapper.idDigits);
      expect(hasValidCheckDigit(id)).toBe(true);
    }
    expect(new Set(ids).size).toBe(ids.length);
    // Random, not sequential: twenty consecutive ids are not a run.
    const sorted = [...ids].sort((a, b) => a - b);
    expect(sorted.at(-1)! - sorted[0]!).toBeGreaterThan(1000);
  });

  test("every single mistyped digit and every adjacent swap fails the check", async () => {
    const { accountId } = await newAccount();
    for (const room of ["alpha", "beta", "gamma"]) {
      const digits = String(await mapperIdFor(accountId, `${room}@conference.example.com`));
      for (let i = 0; i < digits.length; i++) {
        for (let d = 0; d <= 9; d++) {
          if (String(d) === digits[i]) continue;
          const typo = `${digits.slice(0, i)}${d}${digits.slice(i + 1)}`;
          if (typo.startsWith("0")) continue;
          expect(hasValidCheckDigit(Number(typo))).toBe(false);
        }
        if (i + 1 < digits.length && digits[i] !== digits[i + 1] && !(i === 0 && digits[1] === "0")) {
          const swapped = `${digits.slice(0, i)}${digits[i + 1]}${digits[i]}${digits.slice(i + 2)}`;
          expect(hasValidCheckDigit(Number(swapped))).toBe(false);
        }
      }
    }
  });

  test("concurrent first requests for one conference agree on one id", async () => {
    const { accountId } = await newAccount();
    const ids = await Promise.all(
      Array.from({ length: 12 }, () => mapperIdFor(accountId, "race@conference.example.com")),
    );
    expect(new Set(ids).size).toBe(1);
  });

  test("the SIP gateway resolves an id without knowing the account", async () => {
    const { accountId } = await newAccount();
    const id = await mapperIdFor(accountId, "Lobby@Conference.Example.com");
    expect(await conferenceForMapperId(id)).toEqual({ accountId, conference: "lobby@conference.example.com" });
    // A mistyped id is refused by its check digit; a well-formed unknown one is simply absent.
    expect(await conferenceForMapperId(mistype(id))).toBeNull();
    const body = "12345678".slice(0, config.mapper.idDigits - 1);
    expect(await conferenceForMapperId(Number(`${body}${dammCheckDigit(body)}`))).toBeNull();
  });
});

describe("GET /api/v1/conference-mapper/conferenceMapper", () => {
  let a: Awaited<ReturnType<typeof newAccount>>;
  let b: Awaited<ReturnType<typeof newAccount>>;

  beforeAll(async () => {
    [a, b] = await Promise.all([newAccount(), newAccount()]);
  });

  const as = (account: { apiKey: string }, bearer = false) => ({
    headers: { authorization: bearer ? `Bearer ${account.apiKey}` : account.apiKey },
  });

  test("conference= creates a mapping once and returns the same id after, case-insensitively", async () => {
    const first = await call("GET", `${MAPPER}?conference=daily@conference.meet.example.com`, as(a));
    expect(first.status).toBe(200);
    expect(first.body).toEqual({
      message: expect.any(String),
      id: expect.any(Number),
      conference: "daily@conference.meet.example.com",
    });
    expect(hasValidCheckDigit(first.body.id)).toBe(true);
    const again = await call("GET", `${MAPPER}?conference=Daily@Conference.Meet.Example.com`, as(a, true));
    expect(again.body.id).toBe(first.body.id);
    expect(again.body.conference).toBe("daily@conference.meet.example.com");
  });

  test("id= and its alias cid= look a mapping up", async () => {
    const { body } = await call("GET", `${MAPPER}?conference=lookup@conference.meet.example.com`, as(a));
    for (const param of ["id", "cid"]) {
      const found = await call("GET", `${MAPPER}?${param}=${body.id}`, as(a));
      expect(found.status).toBe(200);
      expect(found.body).toEqual({
        message: expect.any(String),
        id: body.id,
        conference: "lookup@conference.meet.example.com",
      });
    }
  });

  test("conference= takes precedence over id=", async () => {
    const other = await call("GET", `${MAPPER}?conference=other@conference.meet.example.com`, as(a));
    const answer = await call(
      "GET",
      `${MAPPER}?id=${other.body.id}&conference=winner@conference.meet.example.com`,
      as(a),
    );
    expect(answer.body.conference).toBe("winner@conference.meet.example.com");
    expect(answer.body.id).not.toBe(other.body.id);
  });

  test("an unknown, mistyped or other account's id answers conference: false", async () => {
    const mine = await call("GET", `${MAPPER}?conference=private@conference.meet.example.com`, as(a));
    const theirs = await call("GET", `${MAPPER}?id=${mine.body.id}`, as(b));
    expect(theirs.status).toBe(200);
    expect(theirs.body).toEqual({ message: "No conference mapping was found", id: mine.body.id, conference: false });
    const mistyped = await call("GET", `${MAPPER}?id=${mistype(mine.body.id)}`, as(a));
    expect(mistyped.body.conference).toBe(false);
    expect(mistyped.body.message).toContain("check digit");
    // The same address in another account is another conference with its own id.
    const sameName = await call("GET", `${MAPPER}?conference=private@conference.meet.example.com`, as(b));
    expect(sameName.body.id).not.toBe(mine.body.id);
  });

  test("missing or malformed input is 405 with a message", async () => {
    for (const query of [
      "",
      "?id=",
      "?id=12ab",
      "?id=-5",
      "?id=12345678901",
      "?conference=no-at-sign",
      "?conference=room@",
      "?conference=a@b@conference.example.com",
      "?other=1",
    ]) {
      const answer = await call("GET", `${MAPPER}${query}`, as(a));
      expect(answer.status, query).toBe(405);
      expect(answer.body.error.code).toBe("invalid_mapper_input");
      expect(answer.body.message).toBe(answer.body.error.message);
    }
  });

  test("a room typed with spaces or accents is the room jitsi-meet names (its getBackendSafeRoomName)", async () => {
    const spellings = [
      "Design Review@conference.meet.example.com",
      "design review@conference.meet.example.com",
      "design%20review@Conference.Meet.Example.com",
    ];
    const answers = await Promise.all(
      spellings.map((conference) => call("GET", `${MAPPER}?conference=${encodeURIComponent(conference)}`, as(a))),
    );
    for (const answer of answers) {
      expect(answer.status).toBe(200);
      expect(answer.body).toMatchObject({
        id: answers[0]!.body.id,
        conference: "design%20review@conference.meet.example.com",
      });
    }
    const cafe = await call(
      "GET",
      `${MAPPER}?conference=${encodeURIComponent("Café@conference.meet.example.com")}`,
      as(a),
    );
    expect(cafe.body.conference).toBe("caf%c3%a9@conference.meet.example.com");
    const byId = await call("GET", `${MAPPER}?id=${cafe.body.id}`, as(a));
    expect(byId.body.conference).toBe("caf%c3%a9@conference.meet.example.com");
  });

  test("without a valid API key it is 401", async () => {
    expect((await call("GET", `${MAPPER}?conference=x@conference.example.com`)).status).toBe(401);
    expect(
      (await call("GET", `${MAPPER}?conference=x@conference.example.com`, { headers: { authorization: "prl_nope" } }))
        .status,
    ).toBe(401);
  });

  test("the public per-account form answers a browser with no credential, with CORS open", async () => {
    const viaKey = await call("GET", `${MAPPER}?conference=public@conference.meet.example.com`, as(a));
    // Exactly what jitsi-meet builds: the address unencoded, plus its own url= parameter.
    const path =
      `/api/v1/conference-mapper/${a.accountId}/conferenceMapper?conference=public@conference.meet.example.com` +
      "&url=https://meet.example.com/public";
    const viaPath = await call("GET", path);
    expect(viaPath.status).toBe(200);
    expect(viaPath.headers.get("access-control-allow-origin")).toBe("*");
    expect(viaPath.body).toEqual(viaKey.body);
    const byId = await call("GET", `/api/v1/conference-mapper/${a.accountId}/conferenceMapper?id=${viaKey.body.id}`);
    expect(byId.body.conference).toBe("public@conference.meet.example.com");
    // Another account's path does not see a's mapping.
    const elsewhere = await call(
      "GET",
      `/api/v1/conference-mapper/${b.accountId}/conferenceMapper?id=${viaKey.body.id}`,
    );
    expect(elsewhere.body.conference).toBe(false);
    const bad = await call("GET", `/api/v1/conference-mapper/${a.accountId}/conferenceMapper`);
    expect(bad.status).toBe(405);
    expect(bad.headers.get("access-control-allow-origin")).toBe("*");
    expect(
      (await call("GET", "/api/v1/conference-mapper/acc_unknown/conferenceMapper?conference=x@conference.example.com"))
        .status,
    ).toBe(404);
  });
});

describe("GET /api/v1/conference-mapper/phoneNumberList and the admin commands", () => {
  // Each command is a process of its own; on a busy machine a few take seconds.
  test("numbers added on the command line are listed per account in the array form", async () => {
    const [a, b] = await Promise.all([newAccount(), newAccount()]);
    expect((await call("GET", NUMBERS, { headers: { authorization: a.apiKey } })).body).toEqual([]);

    const added = adminCli("add-number", a.accountId, "us", "+1 512 555 0100");
    expect(added.code).toBe(0);
    expect(added.out).toContain("US  +1 512 555 0100");
    expect(adminCli("add-number", a.accountId, "DE", "0800 123 4567", "--toll-free").code).toBe(0);
    // Refusals: a duplicate is exit 1 with a message, a missing argument is misuse (exit 2).
    const duplicate = adminCli("add-number", a.accountId, "US", "+1 512 555 0100");
    expect(duplicate.code).toBe(1);
    expect(duplicate.err).toContain("already lists");
    expect(adminCli("add-number", a.accountId).code).toBe(2);
    for (const [countryCode, formattedNumber] of [
      ["USA", "+1 512 555 0101"],
      ["U1", "+1 512 555 0101"],
      ["US", "call me"],
      ["US", "12"],
    ]) {
      await expect(
        addPhoneNumber(a.accountId, { countryCode: countryCode!, formattedNumber: formattedNumber!, tollFree: false }),
      ).rejects.toThrow();
    }

    const expected = [
      { countryCode: "DE", formattedNumber: "0800 123 4567", tollFree: true, default: false },
      { countryCode: "US", formattedNumber: "+1 512 555 0100", tollFree: false, default: false },
    ];
    const viaKey = await call("GET", `${NUMBERS}?conference=room@conference.meet.example.com`, {
      headers: { authorization: a.apiKey },
    });
    expect(viaKey.status).toBe(200);
    expect(viaKey.body).toEqual(expected);
    const viaPath = await call(
      "GET",
      `/api/v1/conference-mapper/${a.accountId}/phoneNumberList?conference=room@conference.meet.example.com`,
    );
    expect(viaPath.body).toEqual(expected);
    expect(viaPath.headers.get("access-control-allow-origin")).toBe("*");
    expect((await call("GET", NUMBERS, { headers: { authorization: b.apiKey } })).body).toEqual([]);
    expect((await call("GET", NUMBERS)).status).toBe(401);

    const listed = adminCli("list-numbers", a.accountId, "--json");
    const rows = JSON.parse(listed.out) as Array<{ id: number; formatted_number: string }>;
    const us = rows.find((row) => row.formatted_number === "+1 512 555 0100")!;
    expect(adminCli("remove-number", String(us.id)).code).toBe(0);
    expect(adminCli("remove-number", String(us.id)).code).toBe(1);
    expect((await call("GET", NUMBERS, { headers: { authorization: a.apiKey } })).body).toEqual([expected[0]]);
  }, 60_000);

  test("jitsi-meet's dial-in page can read both answers", async () => {
    const account = await newAccount();
    await addPhoneNumber(account.accountId, {
      countryCode: "GB",
      formattedNumber: "+44 20 7946 0000",
      tollFree: false,
    });
    const base = `/api/v1/conference-mapper/${account.accountId}`;
    const conference = "weekly@conference.meet.example.com";
    const [mapping, numbers] = await Promise.all([
      call("GET", `${base}/conferenceMapper?conference=${conference}`),
      call("GET", `${base}/phoneNumberList?conference=${conference}`),
    ]);
    const page = readAsJitsiMeet(mapping.body, numbers.body);
    expect(page.pin).toMatch(/^[1-9][0-9]{5,9}$/);
    expect(page.byCountry.GB).toEqual([
      { countryCode: "GB", formattedNumber: "+44 20 7946 0000", tollFree: false, default: false },
    ]);
  }, 30_000);

  test("the operator marks the default number: it is flagged and listed first, and only one is", async () => {
    const account = await newAccount();
    const numbersOf = async () =>
      (await call("GET", `/api/v1/conference-mapper/${account.accountId}/phoneNumberList`)).body;
    // add-number and --toll-free have their test above; --default is this one's.
    await addPhoneNumber(account.accountId, { countryCode: "DE", formattedNumber: "0800 123 4567", tollFree: true });
    expect(adminCli("add-number", account.accountId, "US", "+1 512 555 0100", "--default").code).toBe(0);
    await addPhoneNumber(account.accountId, {
      countryCode: "GB",
      formattedNumber: "+44 20 7946 0000",
      tollFree: false,
    });
    expect(await numbersOf()).toEqual([
      { countryCode: "US", formattedNumber: "+1 512 555 0100", tollFree: false, default: true },
      { countryCode: "DE", formattedNumber: "0800 123 4567", tollFree: true, default: false },
      { countryCode: "GB", formattedNumber: "+44 20 7946 0000", tollFree: false, default: false },
    ]);

    const rows = await listPhoneNumbers(account.accountId);
    const gb = rows.find((row) => row.countryCode === "GB")!;
    const moved = adminCli("set-default-number", String(gb.id));
    expect(moved.code).toBe(0);
    expect(moved.out).toContain("is now the default");
    const after = (await numbersOf()) as Array<{ countryCode: string; default: boolean }>;
    expect(after.map((number) => [number.countryCode, number.default])).toEqual([
      ["GB", true],
      ["DE", false],
      ["US", false],
    ]);
    expect(adminCli("list-numbers", account.accountId).out).toContain("GB  +44 20 7946 0000  default");
    expect(adminCli("set-default-number", "999999").code).toBe(1);
    expect(adminCli("set-default-number", "abc").code).toBe(2);
  }, 60_000);
});
