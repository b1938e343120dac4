/**
 * Phoenix presence payloads: `presence_state` is `{ <key>: { metas: [meta, ...] } }` and
 * `presence_diff` is `{ joins: <same shape>, leaves: <same shape> }`; every meta carries
 * a unique `phx_ref`, which is how the phoenix client's Presence tells metas apart.
 */
import type { PresenceEntry } from "./broker";

type Metas = Record<string, { metas: PresenceEntry["meta"][] }>;

function group(entries: PresenceEntry[]): Metas {
  const grouped: Metas = {};
  for (const { key, meta } of entries) {
    grouped[key] ??= { metas: [] };
    grouped[key].metas.push(meta);
  }
  return grouped;
}

export function presenceState(entries: PresenceEntry[]): Metas {
  return group(entries);
}

export function presenceDiff(joins: PresenceEntry[], leaves: PresenceEntry[]): { joins: Metas; leaves: Metas } {
  return { joins: group(joins), leaves: group(leaves) };
}
