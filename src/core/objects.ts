/**
 * The account media store as Parley uses it: chat uploads and stream recordings, every object
 * under a per-account prefix. Features speak to this interface only; src/storage/objects.ts
 * serves it from an S3-compatible bucket.
 */
import type { Readable } from "node:stream";

export interface ObjectStore {
  /** False when no store is set up; every other call then fails with `not_configured`. */
  configured(): boolean;
  put(key: string, body: Readable | Uint8Array, meta: { contentLength: number; contentType: string }): Promise<void>;
  /** An address anyone may read the object at for `expiresIn` seconds. */
  presignedGetUrl(key: string, expiresIn: number): Promise<string>;
  /**
   * An address that takes one plain PUT of the object for `expiresIn` seconds, only with
   * `contentType` and exactly `contentLength` bytes (both signed), so a browser can upload
   * without passing through Parley and no larger than asked.
   */
  presignedPutUrl(
    key: string,
    upload: { contentType: string; contentLength: number },
    expiresIn: number,
  ): Promise<string>;
  delete(key: string): Promise<void>;
}

/** The key of an account's object: accounts can never reach each other's keys. */
export function accountKey(accountId: string, path: string): string {
  return `${accountId}/${path}`;
}
