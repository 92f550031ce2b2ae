/**
 * Writes spec/openapi.json from the server's TypeBox route schemas.
 *   node --import tsx scripts/gen-openapi.ts          # write
 *   node --import tsx scripts/gen-openapi.ts --check  # exit 1 when the committed file drifts
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { buildApp } from '../packages/server/src/app.js';
import { loadConfig } from '../packages/server/src/config.js';
import { SqliteStore } from '../packages/server/src/store/sqlite/store.js';

const out = join(dirname(fileURLToPath(import.meta.url)), '..', 'spec', 'openapi.json');
const config = loadConfig({}, { runtime: 'fake', dbPath: ':memory:', testClock: false });
const app = await buildApp({ config, store: new SqliteStore(':memory:'), logger: pino({ level: 'silent' }) });
await app.http.ready();
const res = await app.http.inject({ method: 'GET', url: '/api/v1/openapi.json' });
await app.http.close();
app.store.close();
if (res.statusCode !== 200) throw new Error(`openapi route answered ${res.statusCode}`);
const text = `${JSON.stringify(JSON.parse(res.body), null, 2)}\n`;

if (process.argv.includes('--check')) {
  let current = '';
  try {
    current = readFileSync(out, 'utf8');
  } catch {
    /* missing counts as drift */
  }
  if (current !== text) {
    process.stderr.write(`${out} is out of date; run: node --import tsx scripts/gen-openapi.ts\n`);
    process.exit(1);
  }
  process.stdout.write('spec/openapi.json is up to date\n');
} else {
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, text);
  process.stdout.write(`wrote ${out}\n`);
}
