/** A queued start's RTMP destinations (stream keys), sealed at rest like every other secret. */
import { openPrivateKey, type SealedKey, sealPrivateKey } from "../accounts";

export function sealDestinations(destinations: string[]): SealedKey {
  return sealPrivateKey({ destinations });
}

export function openDestinations(sealed: SealedKey | null): string[] {
  return sealed ? ((openPrivateKey(sealed).destinations as string[] | undefined) ?? []) : [];
}
