/** Every feature's tables, gathered for drizzle and drizzle-kit. */
export * from "../src/modules/accounts/schema";
export * from "../src/modules/conference-log/schema";
export * from "../src/modules/mapper/schema";
export * from "../src/modules/scheduler/schema";
export * from "../src/modules/streaming/schema";
export * from "../src/modules/chat/schema";
export * from "../src/modules/usage/schema";
export * from "../src/modules/limits/schema";
export * from "../sip-gateway/schema";
export * from "../src/modules/operators/schema";
export * from "../src/modules/console/schema";
export * from "../src/modules/catalogue/schema";
export * from "../src/modules/webhooks/schema";
export * from "../src/modules/admin/schema";
export * from "../src/modules/audit/schema";
