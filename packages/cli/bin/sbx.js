#!/usr/bin/env node
// The `sbx` binary: runs the TypeScript CLI in this process through tsx's loader, so the
// terminal, raw mode and signals belong to the CLI itself. The repo's tsconfig is named
// (not looked up from the working directory) because its `paths` point `@sandboxd/sdk` at
// the SDK's sources: the CLI never runs an outdated build, wherever it is started from.
import { fileURLToPath } from 'node:url';
import { register } from 'tsx/esm/api';

register({ tsconfig: fileURLToPath(new URL('../../../tsconfig.json', import.meta.url)) });
const { main } = await import('../src/main.ts');
await main(process.argv);
