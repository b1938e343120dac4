/** A self-signed certificate and its key made by openssl in `dir`, for a test's own TLS server. */
import { join } from "node:path";

export function selfSignedCertificate(dir: string, subject: string, extra: string[] = []) {
  const cert = join(dir, "cert.pem");
  const key = join(dir, "key.pem");
  const made = Bun.spawnSync(
    ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "2"].concat(
      ["-subj", subject],
      extra,
    ),
    { stderr: "pipe" },
  );
  if (made.exitCode !== 0) throw new Error(`openssl failed: ${made.stderr.toString()}`);
  return { cert, key };
}
