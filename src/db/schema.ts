/** Every feature's tables, gathered for drizzle and drizzle-kit. */
export * from "../modules/accounts/schema";
export * from "../modules/events/schema";
export * from "../modules/mapper/schema";
export * from "../modules/scheduler/schema";
export * from "../modules/streaming/schema";
export * from "../modules/messaging/schema";
export * from "../modules/usage/schema";
export * from "../../sip-gateway/schema";
