/**
 * Writes the generated part of docs/api-reference.md from spec/openapi.json: everything
 * below the marker line is replaced; everything above it (the rules, written by hand) is
 * kept as it is. The result goes through Biome's formatter (the whole file: the tables get
 * aligned), so that `biome check` and `--check` agree. Run it after spec/openapi.json
 * changes (scripts/gen-openapi.ts).
 *   node --import tsx scripts/gen-api-docs.ts          # write
 *   node --import tsx scripts/gen-api-docs.ts --check  # exit 1 when the file is out of date
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { apiReference } from './api-docs/reference.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const SPEC = join(ROOT, 'spec/openapi.json');
const DOC = join(ROOT, 'docs/api-reference.md');

/** `markdown` as Biome formats the file. */
function biomeFormat(markdown: string): string {
  const biome = createRequire(import.meta.url).resolve('@biomejs/biome/bin/biome');
  return execFileSync(process.execPath, [biome, 'format', `--stdin-file-path=${DOC}`], {
    cwd: ROOT,
    input: markdown,
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  });
}

const current = readFileSync(DOC, 'utf8');
const text = biomeFormat(apiReference(current, JSON.parse(readFileSync(SPEC, 'utf8'))));
if (process.argv.includes('--check')) {
  if (current !== text) {
    process.stderr.write(
      `${DOC} is out of date with spec/openapi.json; run: node --import tsx scripts/gen-api-docs.ts\n`,
    );
    process.exit(1);
  }
  process.stdout.write('docs/api-reference.md is up to date\n');
} else {
  writeFileSync(DOC, text);
  process.stdout.write(`wrote ${DOC}\n`);
}
