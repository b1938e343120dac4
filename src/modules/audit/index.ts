/** The audit log of operator changes, as the admin API and the console record and read it. */
export { AuditModel } from "./model";
export { type Caller, listAudit, type Operator, recordAfter, recordChange, type Scope } from "./service";
