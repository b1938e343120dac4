/**
 * The layering check: dependency-cruiser with the rules of .ci/dependency-cruiser.cjs over
 * src, workers, sip-gateway and the schema index. Exits non-zero on any violation.
 *
 *   bun .ci/layering.ts [checkout root, default this one]
 *
 * dependency-cruiser parses TypeScript only through TypeScript 2-6 or swc, and Parley type
 * checks with TypeScript 7 (the native compiler), so every file is first turned into
 * JavaScript by Bun's transpiler in a temporary folder, with type-only imports kept as plain
 * imports: a cycle through types is still two files that know each other.
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";

const ROOTS = ["src", "workers", "sip-gateway", "drizzle/schema.ts"];
const CHECK_TIMEOUT_MS = 60_000;

const here = import.meta.dir;
const root = resolve(process.argv[2] ?? join(here, ".."));
const transpiler = new Bun.Transpiler({ loader: "ts", tsconfig: JSON.stringify({ compilerOptions: { verbatimModuleSyntax: true } }) });

/** `import type { A }`, `import { type A, b }`, `export type { A } from`: the same edges without `type`. */
function keepTypeImports(source: string): string {
  return source.replace(
    /\b(import|export)(\s+type)?(\s*)(\{[^}]*\}|\*\s+as\s+\w+|\w+)(\s*from\s*["'])/g,
    (_whole, kind: string, _type: string | undefined, space: string, names: string, from: string) =>
      `${kind}${space || " "}${names.startsWith("{") ? names.replace(/\btype\s+/g, "") : names}${from}`,
  );
}

function tsFiles(path: string): string[] {
  if (statSync(path).isFile()) return path.endsWith(".ts") ? [path] : [];
  return readdirSync(path).flatMap((name) => (name === "node_modules" ? [] : tsFiles(join(path, name))));
}

const work = mkdtempSync(join(tmpdir(), "parley-layering-"));
try {
  const roots = ROOTS.filter((path) => existsSync(join(root, path)));
  for (const file of roots.map((path) => join(root, path)).flatMap(tsFiles)) {
    const target = join(work, relative(root, file)).replace(/\.ts$/, ".js");
    mkdirSync(dirname(target), { recursive: true });
    writeFileSync(target, transpiler.transformSync(keepTypeImports(readFileSync(file, "utf8"))));
  }
  const cruise = Bun.spawnSync(
    [join(here, "..", "node_modules", ".bin", "depcruise"), "--config", join(here, "dependency-cruiser.cjs"), "--output-type", "err", ...roots.map((path) => path.replace(/\.ts$/, ".js"))],
    { cwd: work, stdout: "inherit", stderr: "inherit", timeout: CHECK_TIMEOUT_MS },
  );
  if (cruise.exitCode !== 0) console.error(`layering: violations found (or the check did not finish in ${CHECK_TIMEOUT_MS / 1000} s)`);
  process.exitCode = cruise.exitCode === 0 ? 0 : 1;
} finally {
  rmSync(work, { recursive: true, force: true });
}
