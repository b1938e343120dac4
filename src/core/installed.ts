/**
 * The process's instance of a service that many modules reach by import (the database, the
 * outbox, publish/subscribe, the broker). The module that holds the slot never builds what goes
 * in it: the process's composition root (src/process/root.ts) builds it once and puts it in place,
 * and stops it. A use before the root put it there is a wiring mistake, refused by name rather
 * than answered by a service built on the spot.
 */
export interface Installed<T> {
  /** The instance in place; throws when the process's root has not built one. */
  (): T;
  /** Puts `value` in place, or takes the one in place away (undefined). */
  install(value: T | undefined): void;
}

export function installed<T>(what: string): Installed<T> {
  let value: T | undefined;
  const get = (() => {
    if (value === undefined) {
      throw new Error(
        `${what} is not in place: a process's composition root (src/process/root.ts, buildProcess) builds it`,
      );
    }
    return value;
  }) as Installed<T>;
  get.install = (next) => {
    value = next;
  };
  return get;
}
