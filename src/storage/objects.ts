/** The object store (core/objects) on the S3-compatible bucket of storage/s3. */
import { DeleteObjectCommand, GetObjectCommand, PutObjectCommand } from "@aws-sdk/client-s3";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";
import type { ObjectStore } from "../core/objects";
import { bucket, s3, storageConfigured } from "./s3";

export const objects: ObjectStore = {
  configured: storageConfigured,

  async put(key, body, { contentLength, contentType }) {
    await s3().send(
      new PutObjectCommand({
        Bucket: bucket(),
        Key: key,
        Body: body,
        ContentLength: contentLength,
        ContentType: contentType,
      }),
    );
  },

  presignedGetUrl(key, expiresIn) {
    return getSignedUrl(s3(), new GetObjectCommand({ Bucket: bucket(), Key: key }), { expiresIn });
  },

  presignedPutUrl(key, contentType, expiresIn) {
    return getSignedUrl(s3(), new PutObjectCommand({ Bucket: bucket(), Key: key, ContentType: contentType }), {
      expiresIn,
      // Signed, so the store takes the upload only with the content type asked for here.
      signableHeaders: new Set(["content-type"]),
    });
  },

  async delete(key) {
    await s3().send(new DeleteObjectCommand({ Bucket: bucket(), Key: key }));
  },
};
