/**
 * `npm run image`: builds the release image (packages/server/src/release/image.ts) and prints
 * where it is and its digest. Flags: --force (rebuild even when no input changed),
 * --out DIR (default artifacts/).
 */
import { buildReleaseImage } from '../packages/server/src/release/image.js';

const args = process.argv.slice(2);
for (const a of args)
  if (a !== '--force' && a !== '--out' && args[args.indexOf(a) - 1] !== '--out') {
    console.error(`npm run image: unknown argument ${a} (usage: npm run image -- [--force] [--out DIR])`);
    process.exit(2);
  }
const out = args.includes('--out') ? args[args.indexOf('--out') + 1] : undefined;
if (args.includes('--out') && !out) {
  console.error('npm run image: --out needs a directory');
  process.exit(2);
}
const started = Date.now();
const img = await buildReleaseImage({
  force: args.includes('--force'),
  outDir: out,
  log: (l) => console.log(`sandboxd image: ${l}`),
});
console.log(
  `sandboxd image: ${img.archive} (sandboxd:${img.version}, revision ${img.revision}) ${img.reused ? 'reused: no input changed' : `built in ${Math.round((Date.now() - started) / 1000)} s`}`,
);
console.log(`digest ${img.digest}`);
