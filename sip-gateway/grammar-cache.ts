/**
 * sip.js's SIP grammar is a generated peggy parser that decodes its whole bytecode table
 * (236 rules) on every parse call, and sip.js parses every header it reads: in Bun that
 * was some 20 ms of CPU per call and held the gateway to a few dozen calls a second. This
 * Bun plugin memoizes the decoding as the module loads; the decoded tables are only read.
 * It must be registered before sip.js is first loaded, so the gateway is imported after it.
 */
import { plugin } from "bun";
import { log } from "../src/core/log";

const DECODE = `function peg$decode(s) {
        return s.split("").map((ch) => ch.charCodeAt(0) - 32);
    }`;

const MEMOIZED = `function peg$decode(s) {
        let decoded = peg$decoded.get(s);
        if (decoded === undefined) {
            decoded = s.split("").map((ch) => ch.charCodeAt(0) - 32);
            peg$decoded.set(s, decoded);
        }
        return decoded;
    }`;

plugin({
  name: "sip.js grammar bytecode cache",
  setup(build) {
    build.onLoad({ filter: /sip\.js[\\/]lib[\\/]grammar[\\/]pegjs[\\/]dist[\\/]grammar\.js$/ }, async ({ path }) => {
      const source = await Bun.file(path).text();
      if (!source.includes(DECODE)) {
        log.warn({ path }, "sip: sip.js grammar changed shape; parsing stays uncached");
        return { contents: source, loader: "js" };
      }
      return { contents: `const peg$decoded = new Map();\n${source.replace(DECODE, MEMOIZED)}`, loader: "js" };
    });
  },
});
