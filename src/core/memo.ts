/** Results of a pure function of a string, kept so a hot path computes each only once. */

/**
 * `compute` with its results kept by argument. Past `max` arguments the memory starts over,
 * so a caller that meets unboundedly many of them (API keys, say) cannot grow it without end.
 */
export function memoize<V>(compute: (key: string) => V, max: number): (key: string) => V {
  const kept = new Map<string, V>();
  return (key) => {
    let value = kept.get(key);
    if (value === undefined) {
      value = compute(key);
      if (kept.size >= max) kept.clear();
      kept.set(key, value);
    }
    return value;
  };
}
