#!/usr/bin/env node
// The `sbx` binary: runs the TypeScript CLI in this process through tsx's loader, so the
// terminal, raw mode and signals belong to the CLI itself.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/main.ts');
await main(process.argv);
