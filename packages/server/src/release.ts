import { readFileSync } from 'node:fs';

/**
 * This release's version: `packages/server/package.json`'s `version`, the one place it is
 * written (deploy/releases.json lists the releases; docs/upgrades.md). Read once at import.
 */
export const RELEASE: string = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
