/**
 * Builds `packages/sdk/dist/` (see dist.ts): always, or with `--if-stale` only when its
 * inputs changed since the last build.
 *   node --import tsx packages/sdk/scripts/build.ts [--if-stale]
 */
import { ensureSdkDist } from './dist.js';

try {
  const r = await ensureSdkDist({
    force: !process.argv.includes('--if-stale'),
    log: (msg) => process.stdout.write(`sdk build: ${msg}\n`),
  });
  if (!r.built) process.stdout.write('sdk build: dist is current\n');
} catch (e) {
  process.stderr.write(`${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
}
