/** Presigned upload addresses into the account's part of the object store. */
import { config } from "../../core/config";
import { AppError } from "../../core/errors";
import { accountKey } from "../../core/objects";
import { objects } from "../../storage/objects";
import type { PresignedUpload } from "./model";

const FILE_NAME_MAX_CHARS = 512;
const MIME_TYPE = /^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}\/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$/i;
const EXTENSION = /^\.?[a-z0-9][a-z0-9+_-]{0,31}$/i;

/** Bidi controls: they make `gpj.exe` read as `exe.jpg` in a chat, a folder listing or a download bar. */
const BIDI_CONTROL = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/u;
/** Drawn as a slash or a backslash, and kept by NFKC: the fraction, division and set-minus slashes. */
const SLASH_LOOKALIKE = /[\u2044\u2215\u2216\u29f8\u29f9]/u;

/**
 * A file name is a relative path inside the account's folder: no `..` or `.` segment, no
 * leading slash or backslash, no empty segment and no control character, so a name can
 * never climb out of the account's prefix or into another account's. It is judged and kept
 * in NFKC, so what only looks like a dot or a slash (`․․` one-dot leaders, `／` fullwidth
 * slashes) is judged as the dot or slash it is, and it holds no bidi control.
 */
export function checkFileName(raw: string): string {
  if (BIDI_CONTROL.test(raw)) throw new AppError("validation_failed", "fileName: bidi controls are not allowed");
  const fileName = raw.normalize("NFKC");
  if (SLASH_LOOKALIKE.test(fileName))
    throw new AppError("validation_failed", "fileName: characters drawn as a slash are not allowed; use /");
  if (fileName.length === 0 || fileName.length > FILE_NAME_MAX_CHARS) {
    throw new AppError("validation_failed", `fileName: 1 to ${FILE_NAME_MAX_CHARS} characters`);
  }
  if (/\p{Cc}/u.test(fileName)) throw new AppError("validation_failed", "fileName: control characters are not allowed");
  if (fileName.includes("\\")) throw new AppError("validation_failed", "fileName: use / to separate folders");
  if (fileName.startsWith("/")) throw new AppError("validation_failed", "fileName: must be a relative path");
  if (fileName.split("/").some((segment) => segment === "" || segment === "." || segment === "..")) {
    throw new AppError("validation_failed", "fileName: empty, . and .. path segments are not allowed");
  }
  return fileName;
}

/**
 * `fileType` is an extension ("png", ".pdf") or a MIME type
 * ("image/png"); the upload must then carry that Content-Type.
 */
export function contentTypeFor(fileType: string): string {
  let contentType: string;
  if (MIME_TYPE.test(fileType)) contentType = fileType.toLowerCase();
  else if (!EXTENSION.test(fileType))
    throw new AppError("validation_failed", 'fileType: an extension such as "png" or a MIME type such as "image/png"');
  // Bun reports unknown extensions as octet-stream, which is the right default for them too.
  else
    contentType = Bun.file(`upload.${fileType.replace(/^\./, "").toLowerCase()}`)
      .type.split(";")[0]!
      .trim();
  const allowed = config.storage.uploadContentTypes;
  if (!allowed.includes(contentType))
    throw new AppError("validation_failed", `fileType: ${contentType} is not one of: ${allowed.join(", ")}`);
  return contentType;
}

export async function presignUpload(
  accountId: string,
  upload: { fileName: string; fileType: string; fileSize: number },
): Promise<PresignedUpload> {
  const key = accountKey(accountId, checkFileName(upload.fileName));
  const contentType = contentTypeFor(upload.fileType);
  const max = config.storage.uploadMaxBytes;
  if (upload.fileSize > max) throw new AppError("validation_failed", `fileSize: at most ${max} bytes`);
  const expiresIn = config.storage.presignExpirySeconds;
  const url = await objects.presignedPutUrl(key, { contentType, contentLength: upload.fileSize }, expiresIn);
  return { presigned_url: url, key, content_type: contentType, content_length: upload.fileSize, expires_in: expiresIn };
}
