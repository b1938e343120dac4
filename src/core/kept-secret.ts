/** A random secret generated once into a file and shared by every process of the machine that reads it. */
import { randomBytes } from "node:crypto";
import { linkSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";

/** The secret kept in `file`: undefined when there is none, "" when the file is empty. */
export function keptSecret(file: string): string | undefined {
  try {
    return readFileSync(file, "utf8").trim();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
}

/** The secret in `file` (mode 0600), made of 32 random bytes when the file is missing or empty. */
export function secretKeptIn(file: string): string {
  const kept = keptSecret(file);
  if (kept) return kept;
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  // Written whole under a name of this process's own, then put in place in one step: processes
  // starting together read either no secret or a whole one. Written in place, a process could read
  // the file between its creation and its write, take the empty secret, and die of it.
  const draft = `${file}.${process.pid}.${randomBytes(4).toString("hex")}`;
  writeFileSync(draft, randomBytes(32).toString("base64url"), { mode: 0o600 });
  try {
    // An empty file (a write cut short) is replaced; otherwise the first process to link its secret wins.
    if (kept === "") renameSync(draft, file);
    else linkSync(draft, file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  } finally {
    rmSync(draft, { force: true });
  }
  const secret = keptSecret(file);
  if (!secret) throw new Error(`a secret could not be kept in ${file}`);
  return secret;
}
