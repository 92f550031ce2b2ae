/**
 * Start-up with leftovers of an earlier run: the server serves once live sandboxes are
 * adopted, while the driver removes the leftovers in the background; progress shows in
 * /metrics and in a log line when done.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { after, it } from 'node:test';
import pino from 'pino';
import { buildApp } from '../app.js';
import { loadConfig } from '../config.js';
import { ManualClock } from '../domain/clock.js';
import type { RecoveryReport } from '../runtime/driver.js';
import { FakeDriver } from '../runtime/fake/driver.js';
import { SqliteStore } from '../store/sqlite/store.js';

const dir = mkdtempSync(join(tmpdir(), 'sbxd-startup-'));
after(() => rmSync(dir, { recursive: true, force: true }));
const adminKey = `sk_${'S'.repeat(40)}`;
const config = loadConfig(
  {},
  { runtime: 'fake', dbPath: join(dir, 'db.sqlite'), dataDir: dir, bootstrap: { apiKey: adminKey }, port: 8080 },
);
const clock = new ManualClock(Date.UTC(2030, 0, 1));

/** A fake driver whose recover() leaves `n` leftovers to a background removal the test finishes. */
class SlowRecoveryDriver extends FakeDriver {
  left = 0;
  finish!: () => void;
  override async recover(): Promise<RecoveryReport> {
    const report = await super.recover();
    this.left = 2;
    const done = new Promise<{ cleaned: string[]; failed: [] }>((resolve) => {
      this.finish = () => {
        this.left = 0;
        resolve({ cleaned: ['left_a', 'left_b'], failed: [] });
      };
    });
    return { ...report, background: { pending: () => this.left, done } };
  }
}

it('serves before the leftovers are gone, shows them in sandboxd_recovery_pending, logs when done', async () => {
  // A first run leaves a started sandbox in the database.
  const first = await buildApp({ config, driver: new FakeDriver(), clock, logger: pino({ level: 'silent' }) });
  await first.start();
  const created = await first.http.inject({
    method: 'POST',
    url: '/api/v1/sandboxes',
    headers: { authorization: `Bearer ${adminKey}` },
    payload: { image: 'local/busybox:latest' },
  });
  assert.equal(created.statusCode, 201, created.body);
  const id = created.json().sandbox.id as string;
  await first.close();

  // The next run's driver lost it (a leftover) and still removes its leftovers.
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      lines.push(JSON.parse(String(chunk)));
      cb();
    },
  });
  const driver = new SlowRecoveryDriver();
  const app = await buildApp({ config, driver, clock, store: new SqliteStore(config.dbPath), logger: pino(sink) });
  try {
    await app.start(); // resolves although the leftovers' removal has not finished
    assert.equal((await app.http.inject({ method: 'GET', url: '/healthz' })).statusCode, 200);
    const metric = async () =>
      /^sandboxd_recovery_pending (\d+)$/m.exec((await app.http.inject({ method: 'GET', url: '/metrics' })).body)?.[1];
    assert.equal(await metric(), '2');
    assert.ok(lines.some((l) => l.msg?.toString().startsWith('runtime recovered; removing') && l.pending === 2));
    // The lost record reads as such at once; the driver was not asked to delete it again.
    const rec = await app.store.getSandbox(id);
    assert.equal(rec?.state, 'error');
    assert.ok(!driver.calls.includes(`delete ${id}`), driver.calls.join(', '));

    driver.finish();
    await new Promise((r) => setImmediate(r));
    assert.equal(await metric(), '0');
    const done = lines.find((l) => l.msg === 'leftovers of the earlier run removed');
    assert.deepEqual({ cleaned: done?.cleaned, failed: done?.failed }, { cleaned: 2, failed: 0 });
  } finally {
    await app.close();
  }
});
