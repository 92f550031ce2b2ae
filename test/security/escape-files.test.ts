/**
 * Escape suite, files: symlinks and `..` planted inside a sandbox must never lead a file
 * operation to a host file. Every file operation runs inside the sandbox (its agent, as its
 * user); the host never opens a path under a sandbox's root. The host side (canary files
 * and their hashes) is read by this process, which runs on the host.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { newAccount, RUNTIME, startServer, type Server } from '../e2e/harness.js';

const sha = (p: string) => createHash('sha256').update(readFileSync(p)).digest('hex');

describe('escape suite: files through planted symlinks and .. chains', {
  skip: RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local',
  timeout: 300_000,
}, () => {
  let s: Server;
  let key: string;
  let id: string;
  let base: string;
  /** A host directory with a secret the sandbox must never read, and a file it must never change. */
  let hostDir: string;
  let secret: string;
  const shadowHash = existsSync('/etc/shadow') ? sha('/etc/shadow') : '';
  const h = () => ({ authorization: `Bearer ${key}` });
  const exec = async (command: string) => {
    const r = await s.api('POST', `/api/v1/sandboxes/${id}/exec`, { key, body: { command } });
    assert.equal(r.status, 200, r.text);
    return r.body as { stdout: string; exitCode: number };
  };
  const download = async (path: string) => {
    const r = await fetch(`${base}/files/content?path=${encodeURIComponent(path)}`, { headers: h() });
    return { status: r.status, body: Buffer.from(await r.arrayBuffer()) };
  };
  const upload = (path: string, body: BodyInit) =>
    fetch(`${base}/files/content?path=${encodeURIComponent(path)}`, {
      method: 'PUT',
      headers: h(),
      body,
      duplex: 'half',
    } as RequestInit);

  before(async () => {
    hostDir = mkdtempSync(join(tmpdir(), 'sandboxd-escape-files-'));
    secret = `host-secret-${randomBytes(16).toString('hex')}`;
    writeFileSync(join(hostDir, 'secret'), secret);
    writeFileSync(join(hostDir, 'keep'), 'unchanged');
    s = await startServer();
    key = (await newAccount(s, { tokens: 100_000 })).key;
    const c = await s.api('POST', '/api/v1/sandboxes', { key, body: { image: 'local/busybox:latest' } });
    assert.equal(c.status, 201, c.text);
    id = c.body.sandbox.id;
    base = `${s.baseUrl}/api/v1/sandboxes/${id}`;
  });
  after(async () => {
    await s?.stop();
    rmSync(hostDir, { recursive: true, force: true });
  });

  it('a symlink to a host path resolves inside the sandbox (/tmp/x -> /etc/shadow, -> a host canary)', async () => {
    await exec(`ln -s /etc/shadow /tmp/x; ln -s ${hostDir}/secret /tmp/y; ln -s ${hostDir} /tmp/z`);
    const x = await download('/tmp/x');
    // The sandbox's own /etc/shadow (busybox has none: 404), never the host's.
    assert.ok(x.status === 404 || x.status === 200, String(x.status));
    if (shadowHash) assert.notEqual(createHash('sha256').update(x.body).digest('hex'), shadowHash);
    for (const p of ['/tmp/y', '/tmp/z/secret', `${hostDir}/secret`]) {
      const r = await download(p);
      assert.equal(r.status, 404, `${p}: ${r.status}`);
      assert.ok(!r.body.toString().includes(secret));
    }
    const list = await fetch(`${base}/files?path=${encodeURIComponent(hostDir)}`, { headers: h() });
    assert.equal(list.status, 404);
  });

  it('.. chains stop at the sandbox root', async () => {
    const r = await download('/../../../../../../etc/hostname');
    assert.equal(r.status, 200);
    assert.notEqual(r.body.toString().trim(), readFileSync('/etc/hostname', 'utf8').trim());
    const st = await fetch(`${base}/files/stat?path=${encodeURIComponent(`/tmp/../../..${hostDir}/secret`)}`, {
      headers: h(),
    });
    assert.equal(st.status, 404);
  });

  it('an upload to a planted symlink replaces the link in the sandbox; the host file is untouched', async () => {
    await exec(`ln -sf ${hostDir}/keep /tmp/evil; mkdir -p ${hostDir}; ln -sf ${hostDir}/keep ${hostDir}/keep-link`);
    assert.equal((await upload('/tmp/evil', 'pwned')).status, 200);
    assert.equal((await exec('cat /tmp/evil; test -L /tmp/evil || echo " not a link"')).stdout, 'pwned not a link\n');
    assert.equal(readFileSync(join(hostDir, 'keep'), 'utf8'), 'unchanged');
    // A directory of the same path made inside the sandbox holds the upload, not the host's.
    assert.equal((await upload(`${hostDir}/keep`, 'inside')).status, 200);
    assert.equal(readFileSync(join(hostDir, 'keep'), 'utf8'), 'unchanged');
    assert.deepEqual(readdirSync(hostDir).sort(), ['keep', 'secret']);
  });

  it('a symlink swapped in a loop during uploads never lands a file outside the sandbox', async () => {
    await exec('mkdir -p /tmp/real');
    // Inside the sandbox: /tmp/swap flips between a real directory and a link to the host path.
    const flip = await s.api('POST', `/api/v1/sandboxes/${id}/exec`, {
      key,
      body: {
        command: `i=0; while [ $i -lt 3000 ]; do rm -rf /tmp/swap; ln -s ${hostDir} /tmp/swap; rm -f /tmp/swap; mkdir /tmp/swap; i=$((i+1)); done`,
        options: { background: true },
      },
    });
    assert.equal(flip.status, 200);
    const statuses = new Set<number>();
    for (let i = 0; i < 60; i++) {
      const r = await upload(`/tmp/swap/dropped-${i}`, 'x'.repeat(100_000));
      statuses.add(r.status);
      await r.text();
    }
    for (const st of statuses) assert.ok([200, 404, 400, 409].includes(st), `status ${st}`);
    await fetch(`${base}/processes/${flip.body.pid}/signal`, {
      method: 'POST',
      headers: { ...h(), 'content-type': 'application/json' },
      body: JSON.stringify({ signal: 'SIGKILL' }),
    });
    assert.deepEqual(readdirSync(hostDir).sort(), ['keep', 'secret']);
    assert.equal(readFileSync(join(hostDir, 'secret'), 'utf8'), secret);
  });

  it('remove and move through links touch only the sandbox', async () => {
    await exec(`ln -s / /tmp/rootlink; ln -s ${hostDir} /tmp/hostlink`);
    const del = await fetch(`${base}/files?path=/tmp/rootlink`, { method: 'DELETE', headers: h() });
    assert.equal(del.status, 204);
    assert.equal((await exec('test -x /bin/busybox && echo ok')).stdout, 'ok\n');
    const mv = await fetch(`${base}/files/move`, {
      method: 'POST',
      headers: { ...h(), 'content-type': 'application/json' },
      body: JSON.stringify({ from: `${hostDir}/secret`, to: '/tmp/stolen' }),
    });
    assert.equal(mv.status, 404);
    const del2 = await fetch(`${base}/files?path=${encodeURIComponent(`/tmp/hostlink/secret`)}`, {
      method: 'DELETE',
      headers: h(),
    });
    assert.equal(del2.status, 404);
    assert.deepEqual(readdirSync(hostDir).sort(), ['keep', 'secret']);
    if (shadowHash) assert.equal(sha('/etc/shadow'), shadowHash);
  });
});
