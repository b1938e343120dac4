#!/usr/bin/env node
/** The `parley` command of the installed package: see docs/cli.md. */
import { runCli } from "./cli.js";

process.exitCode = await runCli(process.argv.slice(2));
