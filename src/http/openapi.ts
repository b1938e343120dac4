/**
 * The OpenAPI 3.1 description Parley publishes at /swagger/json. @elysiajs/swagger's path
 * builder turns each route's TypeBox models into an operation; this module then makes the
 * result exact, in one pass over the routes, rather than by hand in every route:
 * - answers carry the content types Parley sends (JSON unless a route declares its own),
 *   and bodies the types it accepts (JSON unless a route lists more);
 * - the errors the pipeline itself answers are added from what the route takes: 400 for
 *   every route (its query string is checked, whatever its schema), 404 for a path naming a
 *   resource, 413 and 415 for a body; guards and limits declare theirs (401, 403, 429, 503) as `detail.responses`
 *   of their macros, merged here with the route's own;
 * - every error answer refers to the one `Error` schema, whose `code` lists the server's codes;
 * - Elysia's coercing number types (`string | integer`) are written as the number they are,
 *   and `nullable` (a 3.0 word) is dropped where `type: "null"` already says it.
 */
import { filterPaths, registerSchemaPath } from "@elysiajs/swagger/utils";
import { ERROR_SCHEMA_REF, ErrorModel } from "./errors";

type Json = Record<string, unknown>;
type Schema = Record<string, unknown>;

export interface RouteToDescribe {
  method: string;
  path: string;
  hooks: Json;
}

const JSON_TYPE = "application/json";
const ERROR_SCHEMA_NAME = "Error";

/** What each status means when a route says nothing more of it. */
const STATUS_DESCRIPTIONS: Record<string, string> = {
  "101": "Switching Protocols: the connection is now a WebSocket",
  "200": "OK",
  "201": "Created",
  "202": "Accepted",
  "204": "No Content",
  "302": "Found: the Location header holds the address",
  "400": "The request is malformed: a parameter, the query string or the body does not match the schema",
  "401": "No credential, or one that is unknown, revoked or expired",
  "403": "The credential does not allow this",
  "404": "No such resource",
  "405": "Missing or malformed input (the conference mapper's status for it)",
  "409": "Conflict with the current state",
  "413": "The body is larger than the server accepts (MAX_BODY_BYTES)",
  "415": "The body is JSON sent under another content type",
  "419": "The reservation's time is over (Jicofo's reservation contract)",
  "422": "Well-formed but invalid",
  "429": "A rate limit or quota is used up: Retry-After and the RateLimit headers say when to retry",
  "503": "A service Parley depends on (PostgreSQL, Redis) is unavailable: retry after Retry-After seconds",
  "504": "The operation did not finish within 30 seconds",
};

/**
 * An answer of content types other than JSON alone, for a route's `detail.responses`: each
 * type with its schema (a TypeBox model or plain JSON Schema), as `{ "text/csv": Csv }`.
 */
export function answerOf(description: string, types: Record<string, object>) {
  const content = Object.fromEntries(Object.entries(types).map(([type, schema]) => [type, { schema }]));
  // TypeBox models are JSON Schema, which OpenAPI 3.1's types do not know by that name.
  return { description, content: content as Record<string, { schema: Record<string, never> }> };
}

const RETRY_AFTER: { description: string; schema: { type: "integer" } } = {
  description: "Seconds to wait before trying again",
  schema: { type: "integer" },
};

/** The headers that come with an error: when to retry, and for a limit the state of its policies (docs/limits.md). */
const ERROR_HEADERS: Record<string, Record<string, { description: string; schema: { type: "integer" | "string" } }>> = {
  "429": {
    "Retry-After": RETRY_AFTER,
    "RateLimit-Policy": {
      description: 'The quota of each limit that applied: "name";q=100;w=1',
      schema: { type: "string" },
    },
    RateLimit: { description: 'What is left of each: "name";r=0;t=1', schema: { type: "string" } },
  },
  "503": { "Retry-After": RETRY_AFTER },
};

/** The one error answer, for `detail.responses` of guards, limits and routes. */
export function errorAnswer(status: keyof typeof STATUS_DESCRIPTIONS, description?: string) {
  return {
    description: description ?? STATUS_DESCRIPTIONS[status] ?? "Error",
    ...(ERROR_HEADERS[status] ? { headers: ERROR_HEADERS[status] } : {}),
    content: { [JSON_TYPE]: { schema: { $ref: ERROR_SCHEMA_REF } } },
  };
}

/** `detail.responses` declaring error answers of the one shape, e.g. for a guard's macro. */
export function errorAnswers(...statuses: Array<keyof typeof STATUS_DESCRIPTIONS>) {
  return Object.fromEntries(statuses.map((status) => [status, errorAnswer(status)]));
}

const isObject = (value: unknown): value is Json =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/**
 * Elysia validates query, params and responses with coercing copies of `t.Integer`/`t.Number`
 * (`anyOf: [{type: "string", format: "integer"}, {type: "integer"}]`), and the path builder
 * reads those copies. On the wire the value is the number: a JSON number in a body, its
 * decimal digits in a URL, which is what `type: "integer"` means for a parameter.
 */
function numberOfCoercion(schema: Schema): Schema | undefined {
  const variants = schema.anyOf;
  if (!Array.isArray(variants) || variants.length !== 2) return undefined;
  const [asText, asNumber] = variants as Schema[];
  if (asText?.type !== "string" || !["integer", "numeric"].includes(asText.format as string)) return undefined;
  if (asNumber?.type !== "integer" && asNumber?.type !== "number") return undefined;
  // The path builder writes a parameter's schema as `{ type: undefined, ...keywords }`.
  const keywords = Object.entries(schema).filter(([key, value]) => key !== "anyOf" && value !== undefined);
  return { ...asNumber, ...Object.fromEntries(keywords) };
}

/** The schema as JSON Schema 2020-12 (OpenAPI 3.1's dialect) says it, exactly. */
function exactSchema(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(exactSchema);
  if (!isObject(value)) return value;
  const number = numberOfCoercion(value);
  if (number) return exactSchema(number);
  const out: Json = {};
  for (const [key, inner] of Object.entries(value)) {
    // `nullable` is not a 3.1 keyword: t.Nullable's union already holds `type: "null"`.
    if (key === "nullable") continue;
    // Under `properties` the keys are field names, not keywords: a field may be called `nullable`.
    out[key] =
      key === "properties" && isObject(inner)
        ? Object.fromEntries(Object.entries(inner).map(([name, field]) => [name, exactSchema(field)]))
        : exactSchema(inner);
  }
  return out;
}

/**
 * A route's hooks as the path builder should read them: error answers named by the one
 * model (so they refer to `Error`), and `detail.responses`/`detail.requestBody` held back,
 * since the builder would let them replace what the models say instead of adding to it.
 */
function prepared(hooks: Json): { hooks: Json; responses: Json; bodyTypes?: string[] } {
  const { responses = {}, requestBody, ...detail } = (hooks.detail ?? {}) as Json;
  let response = hooks.response;
  if (isObject(response) && !(Symbol.for("TypeBox.Kind") in response)) {
    response = Object.fromEntries(
      Object.entries(response).map(([status, schema]) => [status, schema === ErrorModel ? ERROR_SCHEMA_NAME : schema]),
    );
  }
  const bodyTypes =
    isObject(requestBody) && isObject(requestBody.content) ? Object.keys(requestBody.content) : undefined;
  return { hooks: { ...hooks, response, detail }, responses: responses as Json, bodyTypes };
}

/** The errors the pipeline answers for a route that takes this input (src/http/pipeline.ts). */
function pipelineErrors(route: RouteToDescribe, operation: Json): string[] {
  // 400 on every route: besides validation, the pipeline refuses any query string that holds
  // text PostgreSQL cannot store (src/http/text.ts), named in a schema or not.
  const statuses = ["400"];
  const parameters = (operation.parameters ?? []) as Json[];
  if (parameters.some((parameter) => parameter.in === "path")) statuses.push("404");
  if (route.hooks.body) statuses.push("413", "415");
  return statuses;
}

/** Only the content types Parley sends: the path builder lists JSON, form data and text for every answer. */
function onlyJson(content: unknown): Json | undefined {
  if (!isObject(content)) return undefined;
  const json = content[JSON_TYPE];
  return json === undefined ? content : { [JSON_TYPE]: json };
}

function describeOperation(route: RouteToDescribe, operation: Json, declared: Json, bodyTypes?: string[]): Json {
  const responses: Json = {};
  // A socket's route has no answer model: the path builder's placeholder 200 is not what it sends.
  const generated = route.method === "WS" ? {} : ((operation.responses ?? {}) as Json);
  for (const [status, answer] of Object.entries(generated)) {
    // The builder leaves schema keywords (an array's `items`) beside a response's content: only these belong there.
    const { content, description, headers } = answer as Json;
    const typed = onlyJson(content);
    // An error answer's model describes the shape; what the status means says more.
    const own = description === ErrorModel.description ? undefined : description;
    responses[status] = {
      description: own ?? STATUS_DESCRIPTIONS[status] ?? "Answer",
      ...(headers ? { headers } : {}),
      ...(typed ? { content: typed } : {}),
    };
  }
  for (const status of pipelineErrors(route, operation)) responses[status] ??= errorAnswer(status);
  Object.assign(responses, declared);
  const sorted = Object.fromEntries(Object.entries(responses).sort(([a], [b]) => a.localeCompare(b)));

  const described: Json = { ...operation, responses: sorted };
  // A parameter's own `examples` is a map of Example Objects; TypeBox's list belongs in its schema.
  if (Array.isArray(operation.parameters)) {
    described.parameters = (operation.parameters as Json[]).map(({ examples, description, ...parameter }) => ({
      ...parameter,
      ...(description === undefined ? {} : { description }),
      schema: { ...(parameter.schema as Json), ...(examples === undefined ? {} : { examples }) },
    }));
  }
  const body = operation.requestBody as Json | undefined;
  if (body) {
    const schema = ((body.content as Json)[JSON_TYPE] as Json).schema;
    described.requestBody = {
      ...body,
      content: Object.fromEntries((bodyTypes ?? [JSON_TYPE]).map((type) => [type, { schema }])),
    };
  }
  // Public routes say so: no security requirement at all reads as "the document's default".
  described.security ??= [];
  return described;
}

/** The OpenAPI document of these routes, with `base` (info, components, servers) around them. */
export function describeApi(routes: RouteToDescribe[], models: Json, base: Json): Json {
  const paths: Json = {};
  const declaredOf = new Map<string, { route: RouteToDescribe; responses: Json; bodyTypes?: string[] }>();
  const allModels = { ...models, [ERROR_SCHEMA_NAME]: ErrorModel };
  for (const route of routes) {
    if ((route.hooks.detail as Json | undefined)?.hide === true) continue;
    // The WebSocket upgrade is an ordinary GET until the server answers 101.
    const method = route.method === "WS" ? "GET" : route.method;
    if (!["GET", "PUT", "POST", "DELETE", "PATCH", "HEAD"].includes(method)) continue;
    const { hooks, responses, bodyTypes } = prepared(route.hooks);
    registerSchemaPath({ schema: paths as never, hook: hooks as never, method, path: route.path, models: allModels });
    declaredOf.set(`${method.toLowerCase()} ${route.path.replace(/:(\w+)/g, "{$1}")}`, { route, responses, bodyTypes });
  }
  const described: Json = {};
  for (const [path, item] of Object.entries(
    filterPaths(paths as never, { excludeStaticFile: false, exclude: [] }) as Json,
  )) {
    const operations: Json = {};
    for (const [method, operation] of Object.entries(item as Json)) {
      const declared = declaredOf.get(`${method} ${path}`);
      if (!declared) continue;
      operations[method] = describeOperation(declared.route, operation as Json, declared.responses, declared.bodyTypes);
    }
    described[path] = operations;
  }
  const components = (base.components ?? {}) as Json;
  return exactSchema({
    openapi: "3.1.0",
    ...base,
    paths: described,
    components: { ...components, schemas: { ...models, [ERROR_SCHEMA_NAME]: ErrorModel } },
  }) as Json;
}
