/**
 * Text that PostgreSQL can store. It refuses U+0000 in text and jsonb, and an unpaired
 * surrogate has no UTF-8 form: either would fail at the database, as a 500 that Prosody
 * retries for ever. So every string a client sends is checked at the edge: declared fields
 * with the one `Text` type (a TypeBox format, so validation names the field), and whatever
 * free-form JSON a route accepts (extra event_sync members, media-server callbacks, socket
 * pushes) with `firstUnstorable`.
 */
import { t } from "elysia";
import { FormatRegistry } from "elysia/type-system";

const TEXT_FORMAT = "text";
const UNSTORABLE_REASON = "must not contain NUL characters or unpaired UTF-16 surrogates";

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Any surrogate at all: most strings have none, and this class runs on JSC's regex JIT, where
 * the lookbehind above makes the full test run in the interpreter.
 */
const SURROGATE = /[\uD800-\uDFFF]/;

export function isStorable(value: string): boolean {
  return !value.includes("\u0000") && (!SURROGATE.test(value) || !LONE_SURROGATE.test(value));
}

FormatRegistry.Set(TEXT_FORMAT, isStorable);

type StringOptions = NonNullable<Parameters<typeof t.String>[0]>;

/**
 * The string type of every request field. A field with a format of its own (email, uri)
 * keeps it: those formats admit neither NUL nor surrogates, and the pipeline checks every
 * validated body, query and path once more with `firstUnstorable` before a handler runs.
 */
export function Text(options: StringOptions = {}) {
  return t.String({ format: TEXT_FORMAT, ...options });
}

/**
 * The member of a model that holds its own refusal reason, which a REST answer (pipeline.ts)
 * and a socket's error reply (src/realtime/payloads.ts) give after the field's name. An OpenAPI
 * extension, so the published description stays valid.
 */
export const REASON = "x-reason";

/** A model's reason, when it gives one. */
export function reasonOf(schema: unknown): string | undefined {
  const reason = (schema as Record<string, unknown> | undefined)?.[REASON];
  return typeof reason === "string" ? reason : undefined;
}

const NAME_FORMAT = "name";
/** Unicode's control characters (C0, DEL, C1): a newline or an escape in a name rewrites a terminal or a log line. */
const CONTROL = /\p{Cc}/u;
export const NAME_REASON = "must not contain control characters (U+0000-U+001F, U+007F-U+009F)";

FormatRegistry.Set(NAME_FORMAT, (value) => !CONTROL.test(value) && isStorable(value));

/**
 * The type of every name a person gives something and others are shown: accounts, operators,
 * tokens, key labels, webhook descriptions, end users. Text without control characters.
 */
export function Name(options: StringOptions = {}) {
  return t.String({ format: NAME_FORMAT, ...options });
}

/** Whether a schema found failing is a Name's, so the answer says why. */
export function isNameSchema(schema: { format?: unknown } | undefined): boolean {
  return schema?.format === NAME_FORMAT;
}

/** JSON nested deeper than this is refused rather than walked (no request of Parley's comes near). */
const MAX_DEPTH = 64;

export interface Unstorable {
  /** Where, such as `occupant.extra.2`; `where` given to `firstUnstorable` prefixes it. */
  path: string;
  reason: string;
}

/** The first string (value or member name) PostgreSQL could not store, or undefined when all is storable. */
export function firstUnstorable(value: unknown, where = ""): Unstorable | undefined {
  const found = unstorableWithin(value, 0);
  if (!found) return undefined;
  // The path is built on the way out, from the one value found: a body that is all storable costs no strings.
  const path = joinPath(where, found.path);
  return { path: found.memberName ? `${path || "body"} (a member name)` : path || "value", reason: found.reason };
}

const joinPath = (outer: string, inner: string) => (outer && inner ? `${outer}.${inner}` : outer || inner);

/** What `unstorableWithin` found, below the value it was given: a value, or a member name of the object at `path`. */
interface Found {
  path: string;
  memberName: boolean;
  reason: string;
}

function unstorableWithin(value: unknown, depth: number): Found | undefined {
  if (typeof value === "string")
    return isStorable(value) ? undefined : { path: "", memberName: false, reason: UNSTORABLE_REASON };
  if (typeof value !== "object" || value === null) return undefined;
  if (depth >= MAX_DEPTH)
    return { path: "", memberName: false, reason: `must not nest deeper than ${MAX_DEPTH} levels` };
  if (Array.isArray(value)) {
    for (let index = 0; index < value.length; index++) {
      const found = unstorableWithin(value[index], depth + 1);
      if (found) return { ...found, path: joinPath(String(index), found.path) };
    }
    return undefined;
  }
  for (const key in value) {
    if (!Object.hasOwn(value, key)) continue;
    if (!isStorable(key)) return { path: "", memberName: true, reason: UNSTORABLE_REASON };
    const found = unstorableWithin((value as Record<string, unknown>)[key], depth + 1);
    if (found) return { ...found, path: joinPath(key, found.path) };
  }
  return undefined;
}
