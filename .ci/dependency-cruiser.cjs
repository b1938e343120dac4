/**
 * Parley's layering rule, checked by .ci/test (and `npm run lint`): imports run one way,
 * entry points -> app -> features -> infrastructure, and features meet only through their
 * index.ts. No exception list: a violation fails the build. See docs/architecture.md.
 */
const INFRASTRUCTURE = "^src/(core|db|queue|outbox|storage|http)/";
const FEATURES = "^(src/modules|src/realtime|workers|sip-gateway)/";
/** One feature's folder, captured as $1 for the rules that compare the two ends of an import. */
const ONE_FEATURE = "^(src/modules/[^/]+|src/realtime|workers|sip-gateway)/";
/** A feature's public surface: the index.ts at the top of its folder (JavaScript here, see options). */
const FEATURE_INDEX = "^(src/modules/[^/]+|src/realtime|workers|sip-gateway)/index\\.js$";

module.exports = {
  forbidden: [
    {
      name: "infrastructure-imports-no-feature",
      comment: "src/core, src/db, src/queue, src/outbox, src/storage and src/http never import a feature (src/modules, src/realtime, workers, sip-gateway).",
      severity: "error",
      from: { path: INFRASTRUCTURE },
      to: { path: FEATURES },
    },
    {
      name: "process-is-the-top",
      comment: "src/process (the composition root and what starts a process) and the entry points are above every feature and all infrastructure: nothing there imports them.",
      severity: "error",
      from: { path: ["^src/(core|db|queue|outbox|storage|http|modules|realtime)/", "^(workers|sip-gateway)/"] },
      to: { path: "^src/(process/|index\\.js$|parley\\.js$)" },
    },
    {
      name: "core-is-the-ground",
      comment: "src/core is transport-neutral and sits below the database, queues, the outbox, storage and HTTP: it imports none of them.",
      severity: "error",
      from: { path: "^src/core/" },
      to: { path: "^src/(db|queue|outbox|storage|http)/" },
    },
    {
      name: "features-meet-through-their-index",
      comment: "A feature (a folder of src/modules, src/realtime, workers, sip-gateway) imports another feature only through that feature's index.ts, its public surface; its routes, services and models stay its own.",
      severity: "error",
      from: { path: ONE_FEATURE, pathNot: "/schema\\.js$" },
      to: { path: FEATURES, pathNot: ["^$1/", FEATURE_INDEX] },
    },
    {
      name: "tables-meet-through-their-schema",
      comment: "A feature's schema.ts may also name another feature's tables (its schema.ts) for a foreign key: drizzle-kit loads the schema files alone, and an index loads the feature's services, the database handle with them.",
      severity: "error",
      from: { path: "^(src/modules/[^/]+|src/realtime|workers|sip-gateway)/schema\\.js$" },
      to: { path: FEATURES, pathNot: ["^$1/", FEATURE_INDEX, "/schema\\.js$"] },
    },
    {
      name: "sdk-is-a-leaf",
      comment: "src/sdk is the installable client (@parley/server-sdk): it imports only itself, Node's built-ins and its three runtime packages, never the server.",
      severity: "error",
      from: { path: "^src/sdk/" },
      to: { pathNot: ["^src/sdk/", "(^|node_modules/)(openapi-fetch|standardwebhooks|phoenix)(/|$)"], dependencyTypesNot: ["core"] },
    },
    {
      name: "no-cycle",
      comment: "No import cycle, type-only imports included.",
      severity: "error",
      from: {},
      to: { circular: true },
    },
  ],
  // .ci/layering.ts runs this over JavaScript transpiled from the TypeScript, type imports kept.
  options: {
    doNotFollow: { path: "node_modules" },
    enhancedResolveOptions: { extensions: [".js", ".json"] },
  },
};
