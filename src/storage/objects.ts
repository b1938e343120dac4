/** The object store (core/objects) on the S3-compatible bucket of storage/s3. */
import type { ObjectStore } from "../core/objects";
import { bucket, s3, storageConfigured } from "./s3";

/** The SDK's commands and presigner, loaded with the client on first use (storage/s3). */
const sdk = () => Promise.all([import("@aws-sdk/client-s3"), import("@aws-sdk/s3-request-presigner")]);

export const objects: ObjectStore = {
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
};
