import { expect, test } from "bun:test";
import { t } from "elysia";
import { type Channel, channelOf, registerChannels } from "../../src/realtime/channel";

const probe = (prefix: string): Channel => ({
  prefix,
  models: { name: { field: "name", model: t.String() }, events: {} },
  join: async () => undefined,
  push: async () => ({ reply: {} }),
});

test("a topic reaches the channel registered for its prefix, with the rest as its name", () => {
  const channel = probe("probe");
  registerChannels(channel, channel);
  expect(channelOf("probe:room:a")).toEqual({ channel, name: "room:a" });
  expect(channelOf("probe:")).toEqual({ channel, name: "" });
  expect(channelOf("probe")).toBeUndefined();
  expect(channelOf("other:room")).toBeUndefined();
});

test("two channels cannot claim one prefix", () => {
  registerChannels(probe("claimed"));
  expect(() => registerChannels(probe("claimed"))).toThrow(/already registered/);
});
