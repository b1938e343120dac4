/**
 * The object store (core/objects) on the S3-compatible bucket of storage/s3. The process's
 * composition root (src/process/root.ts) builds it with createObjectStore and puts it in place;
 * `objects` hands each call to that one.
 */
import type { S3Client } from "@aws-sdk/client-s3";
import { installed } from "../core/installed";
import type { ObjectStore } from "../core/objects";
import { bucket, requireStorage, s3Client, storageConfigured } from "./s3";

/** The SDK's commands and presigner, loaded with the client on first use (storage/s3). */
const sdk = () => Promise.all([import("@aws-sdk/client-s3"), import("@aws-sdk/s3-request-presigner")]);

/** The store, with its client made at its first use; `close` lets the client's sockets go. */
export function createObjectStore(): ObjectStore & { close(): Promise<void> } {
  let client: Promise<S3Client> | undefined;
  const s3 = () => {
    requireStorage();
    client ??= s3Client();
    return client;
  };
  return {
    configured: storageConfigured,

    async put(key, body, { contentLength, contentType }) {
      const [{ PutObjectCommand }] = await sdk();
      await (await s3()).send(
        new PutObjectCommand({
          Bucket: bucket(),
          Key: key,
          Body: body,
          ContentLength: contentLength,
          ContentType: contentType,
        }),
      );
    },

    async presignedGetUrl(key, expiresIn) {
      const [{ GetObjectCommand }, { getSignedUrl }] = await sdk();
      return getSignedUrl(await s3(), new GetObjectCommand({ Bucket: bucket(), Key: key }), { expiresIn });
    },

    async presignedPutUrl(key, { contentType, contentLength }, expiresIn) {
      const [{ PutObjectCommand }, { getSignedUrl }] = await sdk();
      const command = new PutObjectCommand({
        Bucket: bucket(),
        Key: key,
        ContentType: contentType,
        ContentLength: contentLength,
      });
      return getSignedUrl(await s3(), command, {
        expiresIn,
        // Signed, so the store takes the upload only with the content type and the size asked for here.
        signableHeaders: new Set(["content-type", "content-length"]),
      });
    },

    async delete(key) {
      const [{ DeleteObjectCommand }] = await sdk();
      await (await s3()).send(new DeleteObjectCommand({ Bucket: bucket(), Key: key }));
    },

    async close() {
      const made = client;
      client = undefined;
      (await made)?.destroy();
    },
  };
}

const built = installed<ObjectStore>("the process's object store");

export function useObjects(store: ObjectStore | undefined): void {
  built.install(store);
}

export const objects: ObjectStore = {
  configured: () => built().configured(),
  put: (key, body, options) => built().put(key, body, options),
  presignedGetUrl: (key, expiresIn) => built().presignedGetUrl(key, expiresIn),
  presignedPutUrl: (key, options, expiresIn) => built().presignedPutUrl(key, options, expiresIn),
  delete: (key) => built().delete(key),
};
