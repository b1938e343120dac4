/** `parley load-test`'s command line: its options, its report as text or JSON, its exit code (docs/cli.md). */
import { parseArgs } from "node:util";
import { ParleyError } from "./errors.js";
import { LoadTestRefused, type LoadTestResult, runLoadTest } from "./load-test.js";
import {
  DEFAULT_RATES,
  type Objective,
  PARTS,
  parseDuration,
  parseObjective,
  withDefaults,
} from "./load-test-options.js";
import { terminalSafe } from "./terminal.js";

type Outcome = "done" | "failed" | "usage" | "refused" | "unreachable" | "missed";

function count(value: string | undefined, what: string, fallback: number): number {
  if (value === undefined) return fallback;
  const number = Number(value);
  if (!Number.isSafeInteger(number) || number < 0) throw new Error(`${what} is a whole number`);
  return number;
}

function rates(value: string | undefined): typeof DEFAULT_RATES {
  const chosen = { ...DEFAULT_RATES };
  for (const entry of value ? value.split(",") : []) {
    const [part, rate] = entry.split("=");
    const number = Number(rate);
    if (!(part! in chosen) || rate === undefined || !Number.isFinite(number) || number < 0)
      throw new Error(`--rate takes part=per-second pairs of ${Object.keys(chosen).join(", ")}: not "${entry}"`);
    chosen[part as keyof typeof chosen] = number;
  }
  return chosen;
}

const ms = (value: number | null) => (value === null ? "-" : `${value.toFixed(1)} ms`);

function report(result: LoadTestResult): string {
  const lines = [
    `load test ${result.id} against ${result.url}, ${result.duration_s} s`,
    `${"part".padEnd(10)}${"ops".padStart(8)}${"errors".padStart(8)}${"ops/s".padStart(9)}` +
      `${"p50".padStart(11)}${"p95".padStart(11)}${"p99".padStart(11)}`,
  ];
  for (const part of PARTS) {
    const figures = result.parts[part];
    if (figures.status !== "ran") {
      lines.push(`${part.padEnd(10)}${figures.status}: ${terminalSafe(figures.reason ?? "")}`);
      continue;
    }
    lines.push(
      `${part.padEnd(10)}${String(figures.operations).padStart(8)}${String(figures.errors).padStart(8)}` +
        `${figures.throughput.toFixed(1).padStart(9)}${ms(figures.p50_ms).padStart(11)}` +
        `${ms(figures.p95_ms).padStart(11)}${ms(figures.p99_ms).padStart(11)}` +
        (figures.first_error ? `  first error: ${terminalSafe(figures.first_error)}` : ""),
    );
  }
  for (const judged of result.objectives) {
    const value = judged.value === null ? "nothing measured" : String(judged.value);
    lines.push(`${judged.met ? "met   " : "MISSED"}  ${judged.objective} (${judged.part}: ${value})`);
  }
  lines.push(result.pass ? "PASS" : "FAIL");
  return lines.join("\n");
}

export async function loadTestCommand(
  argv: string[],
  out: (text: string) => void,
  err: (text: string) => void,
): Promise<Outcome> {
  let options: Parameters<typeof runLoadTest>[0];
  let json = false;
  try {
    const { values } = parseArgs({
      args: argv,
      strict: true,
      options: {
        url: { type: "string" },
        key: { type: "string" },
        duration: { type: "string", default: "60s" },
        rate: { type: "string" },
        receivers: { type: "string" },
        senders: { type: "string" },
        stream: { type: "string" },
        "start-stream": { type: "boolean" },
        viewers: { type: "string" },
        "sink-url": { type: "string" },
        "sink-port": { type: "string" },
        objective: { type: "string", multiple: true },
        json: { type: "boolean" },
      },
    });
    json = values.json === true;
    if (!values.url) throw new Error("--url names the Parley to load");
    if (!values.key) throw new Error("--key takes an API key of an account on it (docs/tokens.md)");
    const durationMs = parseDuration(values.duration!);
    if (durationMs === undefined)
      throw new Error(`--duration is a time such as 60s, 2m or 500ms: not "${values.duration}"`);
    const objectives: Objective[] = (values.objective ?? []).map((text) => {
      const objective = parseObjective(text);
      if (!objective)
        throw new Error(
          `--objective is part.metric<value, part one of ${PARTS.join(", ")} or *, metric errors (in %) ` +
            `or p50, p95, p99 (in ms or s): not "${text}"`,
        );
      return objective;
    });
    options = {
      url: values.url,
      key: values.key,
      durationMs,
      rates: rates(values.rate),
      receivers: count(values.receivers, "--receivers", 10),
      senders: Math.max(1, count(values.senders, "--senders", 2)),
      viewers: count(values.viewers, "--viewers", 5),
      stream: values.stream,
      startStream: values["start-stream"] === true,
      sinkUrl: values["sink-url"],
      sinkPort: count(values["sink-port"], "--sink-port", 0),
      objectives: withDefaults(objectives),
      progress: err,
    };
  } catch (error) {
    err(`load-test: ${(error as Error).message}\n`);
    return "usage";
  }
  let result: LoadTestResult;
  try {
    result = await runLoadTest(options);
  } catch (error) {
    if (error instanceof LoadTestRefused) {
      err(`parley: ${terminalSafe(error.message)}`);
      return "refused";
    }
    if (error instanceof ParleyError) {
      err(`parley: ${terminalSafe(error.message)}`);
      return error.status === 0 ? "unreachable" : "failed";
    }
    throw error;
  }
  out(json ? JSON.stringify(result, null, 2) : report(result));
  return result.pass ? "done" : "missed";
}
