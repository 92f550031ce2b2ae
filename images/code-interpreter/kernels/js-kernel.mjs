#!/usr/bin/env node
/**
 * sandboxd's JavaScript / TypeScript kernel for the code interpreter (Node 18+, no npm packages:
 * JavaScript cells are parsed with Debian's node-acorn, a dependency of its nodejs; TypeScript
 * cells are transpiled and parsed with Debian's node-typescript).
 *
 * Usage: node js-kernel.mjs [--typescript] [--typescript-module=<dir>] [--acorn-module=<dir>]
 *        [--parser=typescript]   (JavaScript parsed with TypeScript's parser, as without acorn)
 *
 * Protocol (the code server's, JSON lines): each stdin line is a request
 * `{"id", "code", "env", "cwd"}`; stdout carries only events `{"id", "type": "stdout"|"stderr",
 * "text"}`, `{"id", "type": "result", "data", "main"}`, `{"id", "type": "error", "name", "value",
 * "traceback"}` and exactly one `{"id", "type": "end", "execution_count"}` per request, in that
 * order. Requests run one at a time, in order. `env` is set in process.env for that request and
 * undone after it; `cwd` (when not null) is chdir'ed to and stays. SIGINT interrupts the running
 * request: it ends with an error named `Interrupted`, the kernel and its state stay.
 * EOF on stdin ends the kernel.
 *
 * The process has two threads: this main thread owns the protocol, env, cwd and signals and is
 * never busy; user code runs in a worker thread whose globals are the notebook's state. A busy
 * cell is stopped through the inspector (`Runtime.terminateExecution` sent to the worker), which
 * aborts the running JavaScript without ending the worker.
 */
import { runMain } from './js-kernel-main.mjs';

runMain(process.argv.slice(2));
