/**
 * What `parley`'s commands take from their command line: the usage error, the checks of its
 * arguments and options, and the operator's password read without echo. Apart from the commands
 * so that each of them reads its arguments the same way.
 */
import { createInterface } from "node:readline";

export class UsageError extends Error {
  constructor(
    message: string,
    /** Whether the usage helps: not for a password typed differently twice. */
    readonly showUsage = true,
  ) {
    super(message);
  }
}

export type Options = Record<string, string | boolean | undefined>;

export function need(value: string | undefined, what: string): string {
  if (!value) throw new UsageError(`missing ${what}`);
  return value;
}

export function whole(value: string | undefined, what: string): number {
  const number = Number(need(value, what));
  if (!Number.isSafeInteger(number) || number < 0) throw new UsageError(`${what} is a whole number`);
  return number;
}

const ALGORITHMS = ["RS256", "ES256", "EdDSA"] as const;
type Algorithm = (typeof ALGORITHMS)[number];

export function algorithm(value: string | boolean | undefined): Algorithm | undefined {
  if (value === undefined) return undefined;
  if (!ALGORITHMS.includes(value as Algorithm)) throw new UsageError(`--alg must be one of ${ALGORITHMS.join(", ")}`);
  return value as Algorithm;
}

export function types(value: string | boolean | undefined) {
  if (value === undefined) return undefined;
  if (value === "all") return null;
  if (typeof value !== "string" || value.trim() === "")
    throw new UsageError("--types needs a comma-separated list of event types, or all");
  return value.split(",").map((type) => type.trim()) as never;
}

/** A webhook limit's option: a positive number (a whole one unless `fraction`), or none (null) to lift it. */
function limit(value: string | boolean | undefined, what: string, fraction = false): number | null | undefined {
  if (value === undefined) return undefined;
  if (value === "none") return null;
  const number = Number(value);
  if (typeof value !== "string" || !(number > 0) || (!fraction && !Number.isSafeInteger(number)))
    throw new UsageError(`${what} is a positive ${fraction ? "number" : "whole number"}, or none`);
  return number;
}

/** The limits an add-webhook or update-webhook sets; none given leaves them as they are. */
export const limits = (options: Options) => ({
  rate_per_second: limit(options.rate, "--rate", true),
  rate_burst: limit(options.burst, "--burst"),
  max_in_flight: limit(options["max-in-flight"], "--max-in-flight"),
});

/** The shortest operator password the server takes (src/modules/operators/service.ts), said in the prompt. */
const PASSWORD_MIN_CHARS = 8;

/**
 * The password from piped stdin (first line), or asked for twice on the terminal without echo:
 * a typing mistake nobody saw would otherwise become the password.
 */
export async function readPassword(): Promise<string> {
  if (!process.stdin.isTTY) {
    const chunks: Buffer[] = [];
    for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks).toString("utf8").split(/\r?\n/)[0] ?? "";
  }
  const terminal = createInterface({ input: process.stdin, output: process.stdout, terminal: true });
  // Nothing typed is echoed: readline writes through this, which writes nothing.
  (terminal as unknown as { _writeToOutput: (text: string) => void })._writeToOutput = () => {};
  // Lines typed ahead (both answers before the first prompt) wait in the iterator, where question() would lose them.
  const lines = terminal[Symbol.asyncIterator]();
  const ask = async (prompt: string) => {
    process.stdout.write(prompt);
    const line = await lines.next();
    process.stdout.write("\n");
    return line.done ? "" : line.value;
  };
  try {
    const password = await ask(`password (at least ${PASSWORD_MIN_CHARS} characters): `);
    if (password.length < PASSWORD_MIN_CHARS)
      throw new UsageError(
        `the password has ${password.length} characters; it needs at least ${PASSWORD_MIN_CHARS}`,
        false,
      );
    if ((await ask("the same password again: ")) !== password)
      throw new UsageError("the two passwords differ; no operator was made", false);
    return password;
  } finally {
    terminal.close();
  }
}
