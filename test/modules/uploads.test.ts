import { beforeAll, describe, expect, test } from "bun:test";
import { loadConfig, overrideConfig } from "../../src/core/config";
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
    const answer = await presign({ fileName: "chat/photo.png", fileType: "png", fileSize: 4096 });
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
    const answer = await presign({ fileName: "doc.pdf", fileType: "application/pdf", fileSize: 10 });
    expect(answer.body.content_type).toBe("application/pdf");
    const signed = new URL(answer.body.presigned_url).searchParams.get("X-Amz-SignedHeaders")!.split(";");
    expect(signed).toContain("content-type");
    expect(signed).toContain("content-length");
    expect(answer.body.content_length).toBe(10);
    // Without a checksum parameter, since a browser's plain PUT cannot send one.
    expect(answer.body.presigned_url).not.toContain("x-amz-checksum");
  });

  test("two accounts uploading the same name get different keys", async () => {
    const other = await newAccount();
    const otherToken = await tokenFor(other.apiKey, { id: "alice" }, "messaging");
    const mine = await presign({ fileName: "same.txt", fileType: "txt", fileSize: 10 });
    const theirs = await presign({ fileName: "same.txt", fileType: "txt", fileSize: 10 }, otherToken);
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
    // Lookalikes judged as what NFKC makes of them: one-dot leaders, fullwidth slashes and backslashes.
    ["\u2024\u2024/escape.png"],
    ["chat\uff0f\uff0e\uff0e\uff0fx.png"],
    ["\uff0fabsolute.png"],
    ["back\uff3cslash.png"],
    ["fraction\u2044slash.png"],
    ["division\u2215slash.png"],
    // Bidi controls: "photo\u202egnp.exe" reads as photo‮gnp.exe, an .exe shown as a .png.
    ["photo\u202egnp.exe"],
    ["isolate\u2066x\u2069.png"],
  ])("fileName %p is refused", async (fileName) => {
    const answer = await presign({ fileName, fileType: "png", fileSize: 10 });
    expect([400, 422]).toContain(answer.status);
    expect(answer.body.error).toBeDefined();
  });

  test("an unusable fileType is refused; an unknown extension uploads as octet-stream", async () => {
    expect((await presign({ fileName: "a.bin", fileType: "not a type!", fileSize: 10 })).status).toBe(422);
    expect((await presign({ fileName: "a.zzz", fileType: "zzz", fileSize: 10 })).body.content_type).toBe(
      "application/octet-stream",
    );
  });

  test("a name is kept as NFKC makes it", async () => {
    const answer = await presign({ fileName: "ｃｈａｔ/ﬁle².png", fileType: "png", fileSize: 10 });
    expect(answer.status).toBe(200);
    expect(answer.body.key).toBe(`${account.accountId}/chat/file2.png`);
  });

  test("content types come from the allow-list: never a page, an SVG or a script", async () => {
    for (const fileType of [
      "text/html",
      "html",
      "image/svg+xml",
      "svg",
      "application/xhtml+xml",
      "text/javascript",
      "js",
    ]) {
      const answer = await presign({ fileName: "x", fileType, fileSize: 10 });
      expect([fileType, answer.status]).toEqual([fileType, 422]);
      expect(answer.body.error.message).toStartWith("fileType: ");
    }
    for (const fileType of ["png", "jpg", "gif", "webp", "pdf", "txt", "mp3", "mp4", "webm", "image/jpeg"]) {
      expect([fileType, (await presign({ fileName: "y", fileType, fileSize: 10 })).status]).toEqual([fileType, 200]);
    }
    const restore = overrideConfig({ storage: { uploadContentTypes: ["image/png"] } });
    try {
      expect((await presign({ fileName: "z", fileType: "pdf", fileSize: 10 })).status).toBe(422);
      expect((await presign({ fileName: "z", fileType: "png", fileSize: 10 })).status).toBe(200);
    } finally {
      restore();
    }
    // Listing one that a browser runs is a configuration error, named.
    expect(() => loadConfig({ ...process.env, UPLOAD_CONTENT_TYPES: "image/png,image/svg+xml" })).toThrow(
      "UPLOAD_CONTENT_TYPES must not list image/svg+xml",
    );
  });

  test("the size is part of the signature and bounded by UPLOAD_MAX_BYTES", async () => {
    const restore = overrideConfig({ storage: { uploadMaxBytes: 1000 } });
    try {
      const over = await presign({ fileName: "big.png", fileType: "png", fileSize: 1001 });
      expect([over.status, over.body.error.message]).toEqual([422, "fileSize: at most 1000 bytes"]);
      const missing = await presign({ fileName: "big.png", fileType: "png" });
      expect([missing.status, missing.body.error.message.split(":")[0]]).toEqual([400, "fileSize"]);
      const exact = await presign({ fileName: "big.png", fileType: "png", fileSize: 1000 });
      expect(exact.status).toBe(200);
      // The size travels in the signed headers: an S3 that verifies SigV4 takes no other Content-Length.
      const url = new URL(exact.body.presigned_url);
      expect(url.searchParams.get("X-Amz-SignedHeaders")).toBe("content-length;content-type;host");
      const put = await fetch(exact.body.presigned_url, {
        method: "PUT",
        body: new Uint8Array(1000),
        headers: { "content-type": "image/png" },
      });
      expect(put.status).toBe(200);
    } finally {
      restore();
    }
  });

  test("needs a messaging token", async () => {
    expect((await call("POST", ROUTE, { body: { fileName: "a.png", fileType: "png", fileSize: 10 } })).status).toBe(
      401,
    );
    // Media tokens are signed RS256 only (what Jitsi verifies), so they come from an RS256 account.
    const media = await tokenFor((await newAccount("RS256")).apiKey, { id: "alice" }, "media");
    expect((await presign({ fileName: "a.png", fileType: "png", fileSize: 10 }, media)).status).toBe(403);
  });

  test("without S3_BUCKET: 501 not_configured naming the setting, and no Retry-After", async () => {
    const restore = overrideConfig({ storage: { bucket: undefined } });
    try {
      const answer = await presign({ fileName: "a.png", fileType: "png", fileSize: 1024 });
      expect(answer.status).toBe(501);
      expect(answer.body.error.code).toBe("not_configured");
      expect(answer.body.error.message).toContain("S3_BUCKET");
      expect(answer.headers.get("retry-after")).toBeNull();
    } finally {
      restore();
    }
  });
});
