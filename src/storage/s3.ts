/**
 * The S3-compatible bucket (AWS, MinIO, R2, s3rver) behind the account media store
 * (core/objects, served by storage/objects): its client and bucket name.
 */
import type { S3Client } from "@aws-sdk/client-s3";
import { config } from "../core/config";
import { AppError } from "../core/errors";

export function storageConfigured(): boolean {
  return config.storage.bucket !== undefined;
}

/** Refuses, with not_configured, a use of the bucket where none is set (asked at every use: tests unset it). */
export function requireStorage(): void {
  if (!storageConfigured())
    throw new AppError(
      "not_configured",
      "uploads and recordings need object storage, which this Parley has not been given: " +
        "set S3_BUCKET (with S3_ENDPOINT, S3_REGION and keys as docs/configuration.md says) and restart it",
    );
}

/**
 * A client of the bucket; the process's object store (storage/objects) makes one, on its first use.
 * The SDK is loaded then: loading it was about a tenth of the CPU a Parley process spends
 * loading its modules, and most processes never touch the bucket.
 */
export function s3Client(): Promise<S3Client> {
  requireStorage();
  return import("@aws-sdk/client-s3").then(
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
}

export function bucket(): string {
  return config.storage.bucket!;
}
