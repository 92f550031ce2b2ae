/**
 * Black-box, real runtime: pause/resume (a counter loop frozen and continued, a terminal kept,
 * no tokens while paused), stop/start keeping the filesystem (also across a kill -9 and
 * restart of the server), snapshots (a package installed before is in a sandbox made from
 * it, refused to another account), every 409, and kill -9 amid each transition.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { TermClient, terminalUrl } from '../../packages/server/test/terminals.js';
import { newAccount, RUNTIME, startServer, type Server } from './harness.js';

const DEBIAN = 'local/debian:bookworm';

describe('pause, stop, start, snapshot (real runtime)', {
  skip: RUNTIME !== 'local' && 'needs the real runtime',
  timeout: 900_000,
}, () => {
  let s: Server;
  let key: string;
  const cfgDir = mkdtempSync(join(tmpdir(), 'sbx-lifecycle-cfg-'));
  const config = join(cfgDir, 'config.json');
  writeFileSync(config, JSON.stringify({ plans: { TINY: { maxPaused: 1, snapshotBytes: 4096, concurrency: 5 } } }));
  const env = { SANDBOXD_TEST_CLOCK: '1', SANDBOXD_CONFIG: config };

  before(async () => {
    s = await startServer({ env });
    key = (await newAccount(s, { tokens: 10_000, plan: 'PRO' })).key;
  });
  after(async () => {
    await s?.stop();
    rmSync(cfgDir, { recursive: true, force: true });
  });

  const api = (method: string, path: string, body?: unknown, k = key) => s.api(method, path, { key: k, body });
  const create = async (body: object = {}, k = key) => {
    const c = await api('POST', '/api/v1/sandboxes', { image: DEBIAN, timeoutMs: 600_000, ...body }, k);
    assert.equal(c.status, 201, c.text);
    return c.body.sandbox.id as string;
  };
  const sh = async (id: string, command: string) => {
    const r = await api('POST', `/api/v1/sandboxes/${id}/exec`, { command });
    assert.equal(r.status, 200, r.text);
    return r.body as { stdout: string; stderr: string; exitCode: number };
  };
  const state = async (id: string) => (await api('GET', `/api/v1/sandboxes/${id}`)).body.sandbox.state as string;

  it('pause freezes every process (a counter loop stops, then continues where it was), keeps a terminal, bills nothing', async () => {
    const id = await create();
    await sh(
      id,
      `nohup sh -c 'i=0; while :; do i=$((i+1)); echo "$i $(date +%s%3N)" >> /tmp/c; sleep 0.05; done' >/dev/null 2>&1 &`,
    );
    const term = await api('POST', `/api/v1/sandboxes/${id}/terminals`, { shell: 'bash' });
    assert.equal(term.status, 201, term.text);
    const tc = await TermClient.connect(terminalUrl(s.baseUrl, id, term.body.terminal.id), {
      authorization: `Bearer ${key}`,
    });
    await tc.control('ready');
    tc.type('echo "pid=$$"\r');
    await tc.waitForOutput(/pid=(\d+)\r\n/);
    const shellPid = /pid=(\d+)\r\n/.exec(tc.text)?.[1];
    // Wait for the loop to run a few rounds.
    for (let i = 0; i < 100 && Number((await sh(id, 'wc -l < /tmp/c')).stdout) < 3; i++) await sleep(50);
    const balanceBefore = (await api('GET', '/api/v1/account')).body.balance;

    const p = await api('POST', `/api/v1/sandboxes/${id}/pause`);
    const frozenFrom = Date.now();
    assert.equal(p.status, 200, p.text);
    assert.equal(p.body.sandbox.state, 'paused');
    const exec = await api('POST', `/api/v1/sandboxes/${id}/exec`, { command: 'true' });
    assert.equal(exec.status, 409);
    assert.deepEqual([exec.body.kind, exec.body.details.state], ['conflict', 'paused']);
    tc.type('echo typed-while-paused\r');
    // An hour passes on the server's clock while it is paused: nothing is billed.
    await s.api('POST', '/api/v1/_test/clock', { body: { advanceMs: 3_600_000 } });
    await sleep(700);
    assert.equal(tc.closeInfo, null, 'the terminal stays open while paused');
    assert.ok(!tc.text.includes('typed-while-paused'), 'the frozen shell neither echoes nor answers');
    const frozenUntil = Date.now();
    const r = await api('POST', `/api/v1/sandboxes/${id}/resume`, { timeoutMs: 120_000 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.sandbox.state, 'started');
    const balanceAfter = (await api('GET', '/api/v1/account')).body.balance;
    // The pause refunded the run's unused minutes (8 or 9), the hour paused cost nothing, the resume reserved 2.
    assert.ok(balanceAfter >= balanceBefore + 5, `paused time billed: ${balanceBefore} -> ${balanceAfter}`);

    // The loop continues from where it was: no iteration ran inside the frozen window, counting goes on.
    const resumedAt = Number((await sh(id, 'tail -n1 /tmp/c')).stdout.split(' ')[0]);
    for (let i = 0; i < 100 && Number((await sh(id, 'tail -n1 /tmp/c')).stdout.split(' ')[0]) < resumedAt + 3; i++)
      await sleep(50);
    const lines = (await sh(id, 'cat /tmp/c')).stdout
      .trim()
      .split('\n')
      .map((l) => l.split(' ').map(Number));
    for (const [i, [n]] of lines.entries()) assert.equal(n, i + 1, 'the counter never restarted nor skipped');
    const inside = lines.filter(([, t]) => t > frozenFrom && t < frozenUntil);
    assert.deepEqual(inside, [], 'no iteration ran while paused');
    assert.ok(lines.at(-1)![0] >= resumedAt + 3, 'it counts on after resume');

    // The same shell answers, and what was typed while paused reaches it now.
    await tc.waitForOutput(/typed-while-paused\r\n/);
    tc.type('echo "pid=$$"\r');
    await tc.waitFor(() => (tc.text.match(/pid=\d+\r\n/g) ?? []).length >= 2, 'second pid');
    const pids = [...tc.text.matchAll(/pid=(\d+)\r\n/g)].map((m) => m[1]);
    assert.deepEqual(pids, [shellPid, shellPid], 'the same shell');
    tc.close();
    await api('DELETE', `/api/v1/sandboxes/${id}`);
  });

  it('stop keeps the filesystem, start boots it again; every wrong state is a 409 naming it', async () => {
    const id = await create();
    await sh(id, 'echo kept > /root/kept.txt && mkdir -p /opt/x && echo 1 > /opt/x/y');
    const st = await api('POST', `/api/v1/sandboxes/${id}/stop`);
    assert.equal(st.status, 200, st.text);
    assert.equal(st.body.sandbox.state, 'stopped');
    for (const [path, body] of [
      ['stop', undefined],
      ['pause', undefined],
      ['resume', {}],
      ['exec', { command: 'true' }],
    ] as const) {
      const r = await api('POST', `/api/v1/sandboxes/${id}/${path}`, body);
      assert.equal(r.status, 409, `${path}: ${r.text}`);
      assert.equal(r.body.details.state, 'stopped');
    }
    const go = await api('POST', `/api/v1/sandboxes/${id}/start`, { timeoutMs: 300_000 });
    assert.equal(go.status, 200, go.text);
    assert.equal(go.body.sandbox.state, 'started');
    assert.equal((await sh(id, 'cat /root/kept.txt /opt/x/y')).stdout, 'kept\n1\n');
    for (const path of ['start', 'resume']) {
      const r = await api('POST', `/api/v1/sandboxes/${id}/${path}`, {});
      assert.equal(r.status, 409, path);
      assert.equal(r.body.details.state, 'started');
    }
    assert.equal((await api('POST', `/api/v1/sandboxes/${id}/pause`)).status, 200);
    const sp = await api('POST', `/api/v1/sandboxes/${id}/stop`);
    assert.equal(sp.body.sandbox.state, 'stopped', 'a paused sandbox stops');
    assert.equal((await api('POST', `/api/v1/sandboxes/${id}/start`)).status, 200);
    assert.equal((await sh(id, 'cat /root/kept.txt')).stdout, 'kept\n');
    await api('DELETE', `/api/v1/sandboxes/${id}`);
  });

  it('a snapshot carries an installed package into new sandboxes of its account only; quota and delete', async () => {
    const id = await create();
    // A real package install with no network: a .deb built in the sandbox, installed by dpkg.
    const deb = await sh(
      id,
      [
        'set -e',
        'mkdir -p /tmp/p/DEBIAN /tmp/p/usr/local/bin',
        'printf "Package: sbx-hello\\nVersion: 1.0\\nArchitecture: all\\nMaintainer: t <t@x>\\nDescription: t\\n" > /tmp/p/DEBIAN/control',
        'printf "#!/bin/sh\\necho hello-from-package\\n" > /tmp/p/usr/local/bin/sbx-hello',
        'chmod 755 /tmp/p/usr/local/bin/sbx-hello',
        'dpkg-deb --build /tmp/p /tmp/sbx-hello.deb >/dev/null',
        'dpkg -i /tmp/sbx-hello.deb >/dev/null',
        'rm /etc/issue',
      ].join('\n'),
    );
    assert.equal(deb.exitCode, 0, deb.stderr);
    const snap = await api('POST', `/api/v1/sandboxes/${id}/snapshot`, { name: 'with-hello' });
    assert.equal(snap.status, 201, snap.text);
    assert.equal(snap.body.image, 'snapshots/with-hello');
    assert.ok(snap.body.sizeBytes > 0);
    assert.equal(await state(id), 'started', 'the sandbox runs on after its snapshot');
    assert.equal((await sh(id, 'echo still-here')).stdout, 'still-here\n');
    assert.equal((await api('POST', `/api/v1/sandboxes/${id}/snapshot`, { name: 'with-hello' })).status, 409);

    const child = await create({ image: 'snapshots/with-hello' });
    const out = await sh(child, 'dpkg -s sbx-hello | grep Status; sbx-hello; test -e /etc/issue || echo issue-gone');
    assert.equal(out.stdout, 'Status: install ok installed\nhello-from-package\nissue-gone\n', out.stderr);
    const got = await api('GET', `/api/v1/sandboxes/${child}`);
    assert.equal(got.body.sandbox.image, 'snapshots/with-hello');
    const list = await api('GET', '/api/v1/snapshots');
    assert.deepEqual(
      list.body.snapshots.map((x: { name: string }) => x.name),
      ['with-hello'],
    );

    const other = await newAccount(s, { tokens: 1000 });
    const theirs = await api('POST', '/api/v1/sandboxes', { image: 'snapshots/with-hello' }, other.key);
    assert.equal(theirs.status, 404);
    assert.equal(theirs.body.kind, 'template_not_found');
    assert.equal((await api('GET', '/api/v1/snapshots', undefined, other.key)).body.count, 0);

    // The plan's quota: TINY allows 4 KiB of snapshots.
    const tiny = await newAccount(s, { tokens: 1000, plan: 'TINY' });
    const t1 = await create({}, tiny.key);
    await s.api('POST', `/api/v1/sandboxes/${t1}/exec`, {
      key: tiny.key,
      body: { command: 'head -c 65536 /dev/urandom > /root/blob' },
    });
    const q = await api('POST', `/api/v1/sandboxes/${t1}/snapshot`, { name: 'big' }, tiny.key);
    assert.equal(q.status, 403, q.text);
    assert.equal(q.body.details.quota, 'snapshotBytes');
    assert.equal((await api('GET', '/api/v1/snapshots', undefined, tiny.key)).body.count, 0);

    assert.equal((await api('DELETE', '/api/v1/snapshots/with-hello')).status, 204);
    assert.equal((await sh(child, 'sbx-hello')).stdout, 'hello-from-package\n', 'its sandboxes keep their files');
    assert.equal((await api('POST', '/api/v1/sandboxes', { image: 'snapshots/with-hello' })).status, 404);
    for (const x of [id, child]) await api('DELETE', `/api/v1/sandboxes/${x}`);
    await api('DELETE', `/api/v1/sandboxes/${t1}`, undefined, tiny.key);
  });

  it('maxPaused: a pause past it is 403 quota and freezes nothing; onTimeout pause at stopAt', async () => {
    const tiny = await newAccount(s, { tokens: 1000, plan: 'TINY' });
    const a = await create({ timeoutMs: 60_000, onTimeout: 'pause' }, tiny.key);
    const b = await create({}, tiny.key);
    const now = Date.parse((await s.api('POST', '/api/v1/_test/clock', { body: { advanceMs: 0 } })).body.now);
    const stopAt = Date.parse((await api('GET', `/api/v1/sandboxes/${a}`, undefined, tiny.key)).body.sandbox.stopAt);
    const due = await s.api('POST', '/api/v1/_test/clock', { body: { advanceMs: stopAt - now + 10 } });
    assert.ok(due.body.stopped.includes(a), due.text);
    assert.equal((await api('GET', `/api/v1/sandboxes/${a}`, undefined, tiny.key)).body.sandbox.state, 'paused');
    const q = await api('POST', `/api/v1/sandboxes/${b}/pause`, undefined, tiny.key);
    assert.equal(q.status, 403);
    assert.equal(q.body.kind, 'quota');
    const ok = await s.api('POST', `/api/v1/sandboxes/${b}/exec`, { key: tiny.key, body: { command: 'echo up' } });
    assert.equal(ok.body.stdout, 'up\n', 'the refused pause froze nothing');
    assert.equal((await api('POST', `/api/v1/sandboxes/${a}/resume`, {}, tiny.key)).status, 200);
    const up = await s.api('POST', `/api/v1/sandboxes/${a}/exec`, { key: tiny.key, body: { command: 'echo up' } });
    assert.equal(up.body.stdout, 'up\n');
    for (const x of [a, b]) await api('DELETE', `/api/v1/sandboxes/${x}`, undefined, tiny.key);
  });

  it('kill -9 amid pause, stop, start and snapshot: after restart each sandbox is in one state the runtime agrees with; stopped ones start with their files', async () => {
    const ids = await Promise.all([create(), create(), create(), create()]);
    for (const id of ids) await sh(id, `echo ${id} > /root/me`);
    assert.equal((await api('POST', `/api/v1/sandboxes/${ids[2]}/stop`)).status, 200);
    // One request of each kind in flight when the server dies.
    const inflight = [
      api('POST', `/api/v1/sandboxes/${ids[0]}/pause`),
      api('POST', `/api/v1/sandboxes/${ids[1]}/stop`),
      api('POST', `/api/v1/sandboxes/${ids[2]}/start`, {}),
      api('POST', `/api/v1/sandboxes/${ids[3]}/snapshot`, { name: 'crash' }),
    ].map((p) => p.catch(() => null));
    await sleep(30);
    await s.kill('SIGKILL');
    await Promise.all(inflight);
    s = await startServer({ dataDir: s.dataDir, port: s.port, env });
    for (const id of ids) {
      const st = await state(id);
      assert.ok(['started', 'paused', 'stopped'].includes(st), `${id}: ${st}`);
      if (st === 'paused') assert.equal((await api('POST', `/api/v1/sandboxes/${id}/resume`, {})).status, 200);
      if (st === 'stopped') {
        const go = await api('POST', `/api/v1/sandboxes/${id}/start`, {});
        assert.equal(go.status, 200, go.text);
      }
      assert.equal((await sh(id, 'cat /root/me')).stdout, `${id}\n`, `${id} kept its files (was ${st})`);
    }
    const snaps = (await api('GET', '/api/v1/snapshots')).body.snapshots as Array<{ name: string }>;
    if (snaps.some((x) => x.name === 'crash')) {
      const c = await create({ image: 'snapshots/crash' });
      assert.equal((await sh(c, 'cat /root/me')).stdout, `${ids[3]}\n`, 'a listed snapshot is whole');
      await api('DELETE', `/api/v1/sandboxes/${c}`);
      await api('DELETE', '/api/v1/snapshots/crash');
    }
    // Stop, then a restart: start boots the kept filesystem.
    assert.equal((await api('POST', `/api/v1/sandboxes/${ids[0]}/stop`)).status, 200);
    await s.kill('SIGKILL');
    s = await startServer({ dataDir: s.dataDir, port: s.port, env });
    assert.equal(await state(ids[0]), 'stopped');
    assert.equal((await api('POST', `/api/v1/sandboxes/${ids[0]}/start`, {})).status, 200);
    assert.equal((await sh(ids[0], 'cat /root/me')).stdout, `${ids[0]}\n`);
    for (const id of ids) await api('DELETE', `/api/v1/sandboxes/${id}`);
  });
});
