/**
 * Usage: the fold of the conference log into per-account usage (run by the cdr worker, refolded
 * by the admin API) and its reports, as the console shows them. Its routes are in ./routes.ts,
 * mounted by the app.
 */
export { foldRoom, refoldLog, sweepUnfolded } from "./fold";
export { reportCsv, usageReport } from "./service";
export type { UsageReport } from "./model";
