/**
 * Stoplight's Prism (`prism proxy`, installed in .ci/contract) in front of a running Parley: every
 * exchange is checked against the OpenAPI description Parley serves at /swagger/json by a
 * validator Parley's authors did not write. Prism forwards every request and passes Parley's
 * answer on unchanged, listing what breaks the description in its `sl-violations` header: a
 * status, content type or body the route does not declare, a route the description lacks, and
 * (when requests are validated) a request it calls wrong. `violations` reads that list.
 *
 * Prism rates a status the route does not declare a warning, not an error: every finding about
 * an answer counts here, whatever Prism's rating.
 *
 * Not `--errors`: with it Prism answers for Parley, its own 401 for any request without
 * credentials among them, so Parley's 401 would never be checked and a page's example would get
 * another answer than the one it shows.
 */
import { resolve } from "node:path";
import type { Subprocess } from "bun";
import { freePort } from "./ports";

const PRISM = resolve(import.meta.dir, "../../.ci/contract/node_modules/@stoplight/prism-cli/dist/index.js");

export interface ValidatingProxy {
  /** Where to send requests instead of Parley: `http://127.0.0.1:PORT`. */
  base: string;
  port: number;
  /** What Prism said last, for failure messages. */
  tail(lines?: number): string;
  /** What Prism found wrong with an exchange, one line each, from the answer's headers; none when all kept to it. */
  violations(headers: Headers): string[];
  stop(): Promise<void>;
}

export interface ProxyOptions {
  /**
   * Also check requests against the description (Prism's default). Off where requests are wrong
   * on purpose (a page showing a 400): Prism would answer for Parley with its own 422.
   */
  validateRequests: boolean;
  /** The description to check against, a URL or a file; Parley's served /swagger/json by default. */
  document?: string;
}

/** Prism's answer when the port it was given was taken between our pick and its listen. */
const PORT_TAKEN = "EADDRINUSE";
/** Test files run in parallel and each picks free ports: a pick can be taken before Prism binds it. */
const PORT_ATTEMPTS = 3;

/** Starts Prism proxying to `upstream`; resolves once it forwards a request there. */
export async function startValidatingProxy(upstream: string, options: ProxyOptions): Promise<ValidatingProxy> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(upstream, options, await freePort());
    } catch (error) {
      if (attempt >= PORT_ATTEMPTS || !String(error).includes(PORT_TAKEN)) throw error;
    }
  }
}

async function startOnce(upstream: string, options: ProxyOptions, port: number): Promise<ValidatingProxy> {
  const output: string[] = [];
  const child: Subprocess<"ignore", "pipe", "pipe"> = Bun.spawn(
    [
      "node",
      PRISM,
      "proxy",
      options.document ?? `${upstream}/swagger/json`,
      upstream,
      `--validate-request=${options.validateRequests}`,
      "--host=127.0.0.1",
      `--port=${port}`,
      // Its info level prints every route at start and every request: warnings and violations only.
      "--verboseLevel=warn",
    ],
    { stdin: "ignore", stdout: "pipe", stderr: "pipe" },
  );
  for (const stream of [child.stdout, child.stderr]) {
    (async () => {
      const decoder = new TextDecoder();
      for await (const chunk of stream) output.push(decoder.decode(chunk, { stream: true }));
    })().catch(() => {});
  }
  const proxy: ValidatingProxy = {
    base: `http://127.0.0.1:${port}`,
    port,
    tail: (lines = 20) => output.join("").split("\n").slice(-lines).join("\n"),
    violations: (headers) => violations(headers, options.validateRequests),
    async stop() {
      child.kill("SIGKILL");
      await child.exited;
    },
  };
  // Prism reads and dereferences the description before it listens: 2 to 5 s, more on a busy machine.
  const deadline = Date.now() + 60_000;
  while (child.exitCode === null && Date.now() < deadline) {
    const answered = await fetch(`${proxy.base}/healthz`, { signal: AbortSignal.timeout(2_000) }).then(
      (response) => response.status === 200,
      () => false,
    );
    if (answered) return proxy;
    await Bun.sleep(100);
  }
  await proxy.stop();
  throw new Error(
    `${child.exitCode === null ? "Prism did not answer within 60 s" : `Prism exited with ${child.exitCode}`}` +
      `\n--- Prism said:\n${proxy.tail()}`,
  );
}

/** One entry of Prism's `sl-violations` header. */
interface Finding {
  location?: string[];
  message?: string;
  severity?: string;
}

/** A route the description lacks: Prism forwards the request and says so about the request. */
const UNDESCRIBED = "Selected route not found";

function violations(headers: Headers, validateRequests: boolean): string[] {
  const listed = headers.get("sl-violations");
  if (listed === null) return [];
  // Prism cuts a list longer than a header may be and says so: the cut list is still a failure.
  if (!listed.startsWith("[")) return [listed];
  return (JSON.parse(listed) as Finding[])
    .filter((found) => {
      if (found.location?.[0] === "response" || found.message === UNDESCRIBED) return true;
      // Its security check runs with request validation off too: a request sent without a key on purpose.
      return validateRequests;
    })
    .map((found) => `${(found.location ?? []).join(".")}: ${found.message} (${found.severity})`);
}
