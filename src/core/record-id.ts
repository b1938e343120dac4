/**
 * A numeric record id as peers send it back: `1`, and `1.0` from Lua 5.3+ modules that
 * decode JSON with cjson (every JSON number becomes a float there, and `tostring` then
 * writes `1.0`). Undefined for anything else, or past `maxDigits` digits.
 */
export function numericId(text: string, maxDigits = 10): number | undefined {
  const match = /^([0-9]+)(?:\.0+)?$/.exec(text.trim());
  if (!match || match[1]!.length > maxDigits) return undefined;
  return Number(match[1]);
}
