/** Presigned upload addresses into the account's part of the object store. */
import { config } from "../../config";
import { AppError } from "../../core/errors";
import { accountKey } from "../../core/objects";
import { objects } from "../../storage/objects";
import type { PresignedUpload } from "./model";

const FILE_NAME_MAX_CHARS = 512;
const MIME_TYPE = /^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}\/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$/i;
const EXTENSION = /^\.?[a-z0-9][a-z0-9+_-]{0,31}$/i;

/**
 * A file name is a relative path inside the account's folder: no `..` or `.` segment, no
 * leading slash or backslash, no empty segment and no control character, so a name can
 * never climb out of the account's prefix or into another account's.
 */
export function checkFileName(fileName: string): string {
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
  if (MIME_TYPE.test(fileType)) return fileType.toLowerCase();
  if (!EXTENSION.test(fileType))
    throw new AppError("validation_failed", 'fileType: an extension such as "png" or a MIME type such as "image/png"');
  const known = Bun.file(`upload.${fileType.replace(/^\./, "").toLowerCase()}`).type;
  // Bun reports unknown extensions as octet-stream, which is the right default for them too.
  return known.split(";")[0]!.trim();
}

export async function presignUpload(accountId: string, fileName: string, fileType: string): Promise<PresignedUpload> {
  const key = accountKey(accountId, checkFileName(fileName));
  const contentType = contentTypeFor(fileType);
  const expiresIn = config.storage.presignExpirySeconds;
  const url = await objects.presignedPutUrl(key, contentType, expiresIn);
  return { presigned_url: url, key, content_type: contentType, expires_in: expiresIn };
}
