/**
 * Which methods each route path answers, so that a request with another method is told 405
 * with an `Allow` header (RFC 9110 §15.5.6) rather than a 404 that says the path is unknown.
 * The router only says "not found"; the table comes from the app's own routes (src/process/app.ts).
 */

interface RoutePattern {
  pattern: RegExp;
  methods: Set<string>;
}

let table: RoutePattern[] = [];

/** Elysia's path syntax as a regular expression: `:name` one segment, `*` the rest. */
function patternOf(path: string): RegExp {
  const source = path
    .split("/")
    .map((segment) => {
      if (segment === "*") return ".*";
      if (segment.startsWith(":")) return segment.endsWith("?") ? "[^/]*" : "[^/]+";
      return segment.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    })
    .join("/");
  return new RegExp(`^${source}/?$`);
}

/** Takes the app's routes; a socket route (WS) is reached with GET. */
export function knowRoutes(routes: ReadonlyArray<{ method: string; path: string }>): void {
  const byPath = new Map<string, Set<string>>();
  for (const { method, path } of routes) {
    const methods = byPath.get(path) ?? new Set<string>();
    methods.add(method === "WS" ? "GET" : method);
    byPath.set(path, methods);
  }
  table = [...byPath].map(([path, methods]) => ({ pattern: patternOf(path), methods }));
}

/** The methods served on a path, sorted, or undefined when no route has that path. */
export function methodsServed(pathname: string): string[] | undefined {
  const methods = new Set<string>();
  for (const route of table) if (route.pattern.test(pathname)) for (const method of route.methods) methods.add(method);
  return methods.size === 0 ? undefined : [...methods].sort();
}
