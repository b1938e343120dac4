import { beforeAll, describe, expect, test } from "bun:test";
import { overrideConfig } from "../../src/config";
import { call, newAccount, tokenFor } from "../helpers";

const ROUTE = "/api/v1/misc/get-presigned";
let account: Awaited<ReturnType<typeof newAccount>>;
let token: string;

beforeAll(async () => {
  account = await newAccount();
  token = await tokenFor(account.apiKey, { id: "alice" }, "messaging");
});

const presign = (body: unknown, bearer = token) =>
  call("POST", ROUTE, { body, headers: { authorization: `Bearer ${bearer}` } });

describe("POST /api/v1/misc/get-presigned", () => {
  test("the URL takes a PUT into the account's folder, and the same bytes read back", async () => {
    const answer = await presign({ fileName: "chat/photo.png", fileType: "png" });
    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject({
      key: `${account.accountId}/chat/photo.png`,
      content_type: "image/png",
      expires_in: 900,
    });
    const url = new URL(answer.body.presigned_url);
    expect(url.pathname).toBe(`/${process.env.S3_BUCKET}/${account.accountId}/chat/photo.png`);
    expect(url.searchParams.get("X-Amz-Expires")).toBe("900");

    const bytes = crypto.getRandomValues(new Uint8Array(4096));
    const put = await fetch(answer.body.presigned_url, {
      method: "PUT",
      body: bytes,
      headers: { "content-type": "image/png" },
    });
    expect(put.status).toBe(200);
    const back = await fetch(`${process.env.S3_ENDPOINT}/${process.env.S3_BUCKET}/${answer.body.key}`);
    expect(back.headers.get("content-type")).toBe("image/png");
    expect(new Uint8Array(await back.arrayBuffer())).toEqual(bytes);
  });

  test("a MIME type is taken as is, and the content type is part of the signature", async () => {
    const answer = await presign({ fileName: "doc.pdf", fileType: "application/pdf" });
    expect(answer.body.content_type).toBe("application/pdf");
    const signed = new URL(answer.body.presigned_url).searchParams.get("X-Amz-SignedHeaders")!.split(";");
    expect(signed).toContain("content-type");
    // Without a checksum parameter, since a browser's plain PUT cannot send one.
    expect(answer.body.presigned_url).not.toContain("x-amz-checksum");
  });

  test("two accounts uploading the same name get different keys", async () => {
    const other = await newAccount();
    const otherToken = await tokenFor(other.apiKey, { id: "alice" }, "messaging");
    const mine = await presign({ fileName: "same.txt", fileType: "txt" });
    const theirs = await presign({ fileName: "same.txt", fileType: "txt" }, otherToken);
    expect(mine.body.key).not.toBe(theirs.body.key);
    expect(theirs.body.key.startsWith(`${other.accountId}/`)).toBe(true);
  });

  test.each([
    ["../escape.png"],
    ["chat/../../other/x.png"],
    ["/absolute.png"],
    ["a//b.png"],
    ["./here.png"],
    ["back\\slash.png"],
    ["new\nline.png"],
    ["nul\u0000.png"],
    ["x".repeat(513)],
  ])("fileName %p is refused", async (fileName) => {
    const answer = await presign({ fileName, fileType: "png" });
    expect([400, 422]).toContain(answer.status);
    expect(answer.body.error).toBeDefined();
  });

  test("an unusable fileType is refused; an unknown extension uploads as octet-stream", async () => {
    expect((await presign({ fileName: "a.bin", fileType: "not a type!" })).status).toBe(422);
    expect((await presign({ fileName: "a.zzz", fileType: "zzz" })).body.content_type).toBe("application/octet-stream");
  });

  test("needs a messaging token", async () => {
    expect((await call("POST", ROUTE, { body: { fileName: "a.png", fileType: "png" } })).status).toBe(401);
    // Media tokens are signed RS256 only (what Jitsi verifies), so they come from an RS256 account.
    const media = await tokenFor((await newAccount("RS256")).apiKey, { id: "alice" }, "media");
    expect((await presign({ fileName: "a.png", fileType: "png" }, media)).status).toBe(403);
  });

  test("without S3_BUCKET: 501 not_configured naming the setting, and no Retry-After", async () => {
    const restore = overrideConfig({ storage: { bucket: undefined } });
    try {
      const answer = await presign({ fileName: "a.png", fileType: "png" });
      expect(answer.status).toBe(501);
      expect(answer.body.error.code).toBe("not_configured");
      expect(answer.body.error.message).toContain("S3_BUCKET");
      expect(answer.headers.get("retry-after")).toBeNull();
    } finally {
      restore();
    }
  });
});
