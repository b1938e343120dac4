/**
 * The long-line check: every line of the TypeScript in src, workers, sip-gateway and test fits in
 * 120 characters. Exits non-zero listing file:line (length) for each line that does not.
 *
 *   bun .ci/long-lines.ts [checkout root, default this one]
 *
 * The formatter wraps code but never strings, templates, regexes or comments, so this catches what
 * it leaves. Exempt, and only these:
 * - src/sdk/generated/** (generated) and test/fixtures/** (recorded peer traffic);
 * - every line touched by a template literal of SQL, tagged sql`…` or beginning with
 *   SELECT, INSERT, UPDATE, DELETE, WITH, CREATE, ALTER or DROP: SQL reads best one clause a line;
 * - test data: in test/**, a line `// long-lines: data` exempts the lines after it up to the next
 *   blank line (keep such a block to the data itself: a recorded message, a literal wire frame).
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative, resolve } from "node:path";

const ROOTS = ["src", "workers", "sip-gateway", "test"];
const SKIPPED = ["src/sdk/generated/", "test/fixtures/"];
const MAX = 120;
const SQL_START = /^\s*(select|insert|update|delete|with|create|alter|drop)\b/i;
const DATA_MARKER = "// long-lines: data";

const root = resolve(process.argv[2] ?? join(import.meta.dir, ".."));

function tsFiles(path: string): string[] {
  if (statSync(path).isFile()) return path.endsWith(".ts") ? [path] : [];
  return readdirSync(path).flatMap((name) => (name === "node_modules" ? [] : tsFiles(join(path, name))));
}

/** After one of these (or at the start), a `/` begins a regex rather than dividing. */
const BEFORE_REGEX = new Set("(,=:[!&|?{};+-*%<>~^".split(""));
const KEYWORDS_BEFORE_REGEX = new Set(["return", "typeof", "case", "do", "else", "in", "of", "void", "yield", "await"]);

/**
 * The 0-based lines spanned by templates of SQL. A small lexer: it follows comments, strings, regexes
 * and templates (with `${…}` nesting) only far enough to know where each template starts and ends.
 */
function sqlLines(text: string): Set<number> {
  const lines = new Set<number>();
  let line = 0;
  let i = 0;
  let lastSignificant = "";
  let lastWord = "";
  // One entry per open template: its start line, whether it is sql, and the brace depth of its
  // current `${…}` (-1 while reading the template's own text).
  const templates: { start: number; sql: boolean; depth: number }[] = [];
  const inTemplateText = () => templates.length > 0 && templates[templates.length - 1]!.depth < 0;

  const advance = (to: number) => {
    for (; i < to && i < text.length; i++) if (text[i] === "\n") line++;
  };
  const closeTemplate = () => {
    const t = templates.pop()!;
    if (t.sql) for (let l = t.start; l <= line; l++) lines.add(l);
  };

  while (i < text.length) {
    if (inTemplateText()) {
      const c = text[i]!;
      if (c === "\\") advance(i + 2);
      else if (c === "`") {
        advance(i + 1);
        closeTemplate();
        lastSignificant = "`";
        lastWord = "";
      } else if (c === "$" && text[i + 1] === "{") {
        advance(i + 2);
        templates[templates.length - 1]!.depth = 0;
        lastSignificant = "{";
        lastWord = "";
      } else advance(i + 1);
      continue;
    }
    const c = text[i]!;
    const next = text[i + 1];
    if (c === "/" && next === "/") {
      const end = text.indexOf("\n", i);
      advance(end < 0 ? text.length : end);
    } else if (c === "/" && next === "*") {
      const end = text.indexOf("*/", i + 2);
      advance(end < 0 ? text.length : end + 2);
    } else if (c === '"' || c === "'") {
      let j = i + 1;
      while (j < text.length && text[j] !== c && text[j] !== "\n") j += text[j] === "\\" ? 2 : 1;
      advance(j + 1);
      lastSignificant = c;
      lastWord = "";
    } else if (c === "`") {
      templates.push({ start: line, sql: lastWord === "sql" || SQL_START.test(text.slice(i + 1, i + 200)), depth: -1 });
      advance(i + 1);
    } else if (
      c === "/" &&
      (lastSignificant === "" || BEFORE_REGEX.has(lastSignificant) || KEYWORDS_BEFORE_REGEX.has(lastWord))
    ) {
      let j = i + 1;
      let inClass = false;
      while (j < text.length && text[j] !== "\n") {
        const r = text[j];
        if (r === "\\") j++;
        else if (r === "[") inClass = true;
        else if (r === "]") inClass = false;
        else if (r === "/" && !inClass) break;
        j++;
      }
      advance(j + 1);
      lastSignificant = "/";
      lastWord = "";
    } else if (/[A-Za-z0-9_$]/.test(c)) {
      let j = i;
      while (j < text.length && /[A-Za-z0-9_$]/.test(text[j]!)) j++;
      lastWord = text.slice(i, j);
      lastSignificant = "a";
      advance(j);
    } else {
      const open = templates[templates.length - 1];
      if (open && c === "{") open.depth++;
      else if (open && c === "}") {
        if (open.depth === 0) open.depth = -1;
        else open.depth--;
      }
      if (!/\s/.test(c)) {
        lastSignificant = c;
        lastWord = "";
      }
      advance(i + 1);
    }
  }
  return lines;
}

/** Lines after a `// long-lines: data` marker in a test file, up to the next blank line. */
function dataLines(lines: string[]): Set<number> {
  const exempt = new Set<number>();
  for (let i = 0; i < lines.length; i++) {
    if (lines[i]!.trim() !== DATA_MARKER) continue;
    for (i++; i < lines.length && lines[i]!.trim() !== ""; i++) exempt.add(i);
  }
  return exempt;
}

const violations: string[] = [];
for (const file of ROOTS.map((path) => join(root, path)).flatMap(tsFiles)) {
  const name = relative(root, file);
  if (SKIPPED.some((prefix) => name.startsWith(prefix))) continue;
  const text = readFileSync(file, "utf8");
  const lines = text.split("\n");
  const long = lines.flatMap((content, index) => (content.length > MAX ? [index] : []));
  if (long.length === 0) continue;
  const sql = sqlLines(text);
  const data = name.startsWith("test/") ? dataLines(lines) : new Set<number>();
  for (const index of long) {
    if (sql.has(index) || data.has(index)) continue;
    violations.push(`${name}:${index + 1} (${lines[index]!.length})`);
  }
}

if (violations.length > 0) {
  console.error(violations.join("\n"));
  console.error(`${violations.length} line(s) over ${MAX} characters`);
  process.exit(1);
}
console.log(`no line over ${MAX} characters`);
