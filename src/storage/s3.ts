/**
 * The S3-compatible bucket (AWS, MinIO, R2, s3rver) behind the account media store
 * (core/objects, served by storage/objects): its client and bucket name.
 */
import type { S3Client } from "@aws-sdk/client-s3";
import { config } from "../core/config";
import { AppError } from "../core/errors";

let client: Promise<S3Client> | undefined;

export function storageConfigured(): boolean {
  return config.storage.bucket !== undefined;
}

/**
 * The client. The SDK is loaded on first use: loading it was about a tenth of the CPU a
 * Parley process spends loading its modules, and most processes never touch the bucket.
 */
export function s3(): Promise<S3Client> {
  if (!storageConfigured())
    throw new AppError(
      "not_configured",
      "uploads and recordings need object storage, which this Parley has not been given: " +
        "set S3_BUCKET (with S3_ENDPOINT, S3_REGION and keys as docs/configuration.md says) and restart it",
    );
  client ??= import("@aws-sdk/client-s3").then(
    ({ S3Client }) =>
      new S3Client({
        endpoint: config.storage.endpoint,
        region: config.storage.region,
        forcePathStyle: config.storage.forcePathStyle,
        credentials:
          config.storage.accessKeyId && config.storage.secretAccessKey
            ? { accessKeyId: config.storage.accessKeyId, secretAccessKey: config.storage.secretAccessKey }
            : undefined,
        // Without these the SDK adds a CRC32 checksum to presigned PUT URLs, which browsers
        // cannot send, so real S3 would reject every direct upload.
        requestChecksumCalculation: "WHEN_REQUIRED",
        responseChecksumValidation: "WHEN_REQUIRED",
      }),
  );
  return client;
}

export function bucket(): string {
  return config.storage.bucket!;
}
