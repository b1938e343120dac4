/**
 * The body types a route takes. JSON unless the route says otherwise with `accepts`: a
 * non-empty body of any other type is answered 415 by the pipeline, whatever the route's
 * schema (a form body under a schema of optional fields would otherwise pass as an empty
 * request and be served with every default).
 */
import { Elysia } from "elysia";

export const JSON_BODY = ["application/json"] as const;
export const FORM_OR_JSON = ["application/x-www-form-urlencoded", "application/json"] as const;

const declared = new WeakMap<Request, readonly string[]>();

/** The body types the route this request matched takes. */
export function acceptedTypesOf(request: Request): readonly string[] {
  return declared.get(request) ?? JSON_BODY;
}

/**
 * A route opts in with `{ accepts: FORM_OR_JSON }`; the macro records it in transform, before
 * validation, and lists the types as the body's in the OpenAPI description (src/http/openapi.ts).
 */
export const accepts = new Elysia({ name: "parley.accepts" }).macro({
  accepts: (types: readonly string[]) => ({
    transform({ request }: { request: Request }) {
      declared.set(request, types);
    },
    detail: { requestBody: { content: Object.fromEntries(types.map((type) => [type, {}])) } },
  }),
});
