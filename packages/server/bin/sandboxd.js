#!/usr/bin/env node
// The `sandboxd` binary: `sandboxd [serve]` serves (as `npm start` does, without its set-up),
// and its other subcommands (packages/server/src/commands/) run the operator's tasks. Runs the
// TypeScript sources in this process through tsx's loader, wherever it is started from.
import { fileURLToPath } from 'node:url';
import { register } from 'tsx/esm/api';

register({ tsconfig: fileURLToPath(new URL('../../../tsconfig.json', import.meta.url)) });
const { run } = await import('../src/commands/index.ts');
process.exitCode = await run(process.argv.slice(2));
