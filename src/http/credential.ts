/**
 * The credential an Authorization header carries. Reading it is HTTP, not authentication: the
 * auth guards check it, and the limits count requests per API key by it without a guard's help.
 */

/** The credential in an Authorization header, with any `Bearer ` prefix removed. */
export function credentialFrom(authorization: string | undefined): string | undefined {
  if (!authorization) return undefined;
  const value = authorization.replace(/^Bearer\s+/i, "").trim();
  return value === "" ? undefined : value;
}
