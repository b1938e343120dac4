/**
 * The console's browser code, built from ui/ with Bun's bundler on first request and kept in
 * memory: there is no separate build step or dev server, and every API process builds its own.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";

export interface ConsoleAssets {
  /**
   * app.js, app.css, and hls-light.js, which app.js loads when a page plays a stream; each also gzipped, as it is sent.
   */
  files: Map<string, { body: string; gzip: Uint8Array<ArrayBuffer>; type: string }>;
  /** Gzipped size, as sent, of app.js, which every page loads, and of every script together. */
  scriptGzipBytes: number;
  allScriptsGzipBytes: number;
}

let built: Promise<ConsoleAssets> | undefined;

async function build(): Promise<ConsoleAssets> {
  const result = await Bun.build({
    entrypoints: [resolve(import.meta.dir, "ui/main.ts")],
    target: "browser",
    format: "esm",
    minify: true,
    naming: { entry: "app.[ext]" },
  });
  if (!result.success)
    throw new Error(`console bundle failed: ${result.logs.map((entry) => entry.message).join("; ")}`);
  // Compressed once, at the highest level, since it is built once and sent many times.
  const files = new Map<string, { body: string; gzip: Uint8Array<ArrayBuffer>; type: string }>();
  const add = (name: string, body: string, type: string) =>
    files.set(name, { body, gzip: Bun.gzipSync(body, { level: 9 }), type });
  for (const output of result.outputs)
    add(output.path.replace(/^.*\//, ""), await output.text(), "text/javascript; charset=utf-8");
  // The player's hls.js: the package's own minified light build gzips smaller than the bundler's
  // minifying of its unminified one. Its source map is not served, so its reference goes.
  const hls = readFileSync(Bun.resolveSync("hls.js/dist/hls.light.min.mjs", import.meta.dir), "utf8").replace(
    /\n\/\/# sourceMappingURL=.*\s*$/,
    "\n",
  );
  add("hls-light.js", hls, "text/javascript; charset=utf-8");
  const style = [
    readFileSync(Bun.resolveSync("uplot/dist/uPlot.min.css", import.meta.dir), "utf8"),
    readFileSync(resolve(import.meta.dir, "ui/console.css"), "utf8"),
  ].join("\n");
  add("app.css", style, "text/css; charset=utf-8");
  const scripts = [...files.entries()].filter(([name]) => name.endsWith(".js"));
  return {
    files,
    scriptGzipBytes: files.get("app.js")!.gzip.length,
    allScriptsGzipBytes: scripts.reduce((sum, [, file]) => sum + file.gzip.length, 0),
  };
}

export function consoleAssets(): Promise<ConsoleAssets> {
  built ??= build().catch((error) => {
    // A failed build is tried again on the next request rather than cached.
    built = undefined;
    throw error;
  });
  return built;
}

/** The page every console address answers: the script mounts the pages into it. */
export const CONSOLE_PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Parley console</title>
<link rel="stylesheet" href="/console/app.css">
<link rel="icon" href="data:,">
</head>
<body>
<div id="app"><p class="loading">Loading the console…</p></div>
<script type="module" src="/console/app.js"></script>
</body>
</html>`;
