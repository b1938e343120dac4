/**
 * Text from a server, made safe to print on a terminal: a name may hold a newline that forges
 * a line of output, an ANSI escape that recolours or rewrites the screen, or a bidi control
 * that reorders what follows. Each is shown as its \u escape instead.
 */
const UNPRINTABLE = /[\p{Cc}\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/gu;

export function terminalSafe(text: string): string {
  return text.replace(UNPRINTABLE, (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** Every string inside a value made terminalSafe, members' names too. */
export function terminalSafeDeep<T>(value: T): T {
  if (typeof value === "string") return terminalSafe(value) as T;
  if (Array.isArray(value)) return value.map(terminalSafeDeep) as T;
  if (typeof value === "object" && value !== null) {
    return Object.fromEntries(
      Object.entries(value).map(([key, inner]) => [terminalSafe(key), terminalSafeDeep(inner)]),
    ) as T;
  }
  return value;
}
