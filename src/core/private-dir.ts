/**
 * The data folder is private to the user Parley runs as: it holds the embedded database (whose
 * WAL carries every row written), the sealing key, the first API key and the sockets. PGlite
 * unpacks its first files 0666 and rewrites some 0644 on every start whatever the umask says,
 * so the modes are set here rather than trusted to the umask alone.
 */
import { chmodSync, lstatSync, mkdirSync, readdirSync } from "node:fs";
import { join } from "node:path";

/** Group and other bits: private means none of them. */
const SHARED_BITS = 0o077;

/** Files and folders Parley makes from now on are its user's alone; call before anything writes. */
export function keepNewFilesPrivate(): void {
  process.umask(SHARED_BITS);
}

/**
 * Creates `dir` when missing and takes group and other permissions off it and everything under it
 * (symbolic links are neither followed nor changed). Says how many entries it changed, and which it
 * could not: those another user owns (a file an administrator put there as root, say).
 */
export function makePrivate(dir: string): { changed: number; notOurs: string[] } {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  let changed = 0;
  const notOurs: string[] = [];
  const visit = (path: string) => {
    try {
      const entry = lstatSync(path);
      if (entry.isSymbolicLink()) return;
      if ((entry.mode & SHARED_BITS) !== 0) {
        chmodSync(path, entry.mode & 0o7700);
        changed++;
      }
      if (entry.isDirectory()) for (const name of readdirSync(path)) visit(join(path, name));
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === "EPERM" || code === "EACCES") notOurs.push(path);
      // An entry removed meanwhile (one of PGlite's temporary files) is no longer anyone's to read.
      else if (code !== "ENOENT") throw error;
    }
  };
  visit(dir);
  return { changed, notOurs };
}
