/**
 * The accounts, as other features use them: look-ups by API key, the signing keys that sign and
 * verify Parley's tokens, the operator-side changes (create, keys, Jitsi domain), the cache
 * invalidation, and sealing a private key at rest. Its tables (./schema.ts) are referenced by
 * every feature's own tables through their foreign keys.
 */
export {
  type Account,
  accountForApiKey,
  accountForApiKeyHash,
  broadcastInvalidation,
  createAccount,
  createApiKey,
  getAccount,
  hashApiKey,
  listAccounts,
  revokeApiKey,
  revokeSigningKey,
  rotateSigningKey,
  setJitsiDomain,
} from "./service";
export { onAccountsInvalidated } from "./caches";
export {
  currentSigningKey,
  publicKeyPemByKidHash,
  publicKeySet,
  type SigningKey,
  verificationKey,
} from "./signing-keys";
export { isSealed, openPrivateKey, type SealedKey, sealPrivateKey, type StoredPrivateKey } from "./sealing";
