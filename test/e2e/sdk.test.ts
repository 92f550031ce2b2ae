/**
 * The SDK against the real server process (fake runtime by default; SANDBOXD_E2E_RUNTIME=local
 * for crun). Typed errors are provoked for real, one per status.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFileSync, mkdtempSync, openAsBlob, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import {
  AuthenticationError,
  ConcurrencyLimitError,
  ConflictError,
  InsufficientTokensError,
  NotFoundError,
  PayloadTooLargeError,
  Sandbox,
  SandboxdApiError,
  SandboxdClient,
  TemplateNotFoundError,
  ValidationError,
  type ImageProgress,
} from '@sandboxd/sdk';
import { ADMIN_KEY, IMAGE, newAccount, RUNTIME, startServer, type Server } from './harness.js';
import { TEST_IMAGE_DIR } from './local-runtime.js';
import { userNode } from './user-node.js';

const ROOT = resolve(fileURLToPath(import.meta.url), '../../..');

/** Runs a program to completion (bounded); rejects with its output on a non-zero exit. */
function run(
  file: string,
  args: string[],
  o: { cwd: string; env?: Record<string, string> },
): Promise<{ stdout: string; stderr: string }> {
  return new Promise((res, rej) => {
    execFile(
      file,
      args,
      { cwd: o.cwd, env: { ...process.env, ...o.env }, timeout: 180_000, maxBuffer: 16 << 20 },
      (err, stdout, stderr) =>
        err
          ? rej(new Error(`${file} ${args.join(' ')}: ${err.message}\n${stdout}\n${stderr}`))
          : res({ stdout, stderr }),
    );
  });
}

describe('SDK against the real server', { timeout: 300_000 }, () => {
  let s: Server;
  let client: SandboxdClient;
  let key: string;
  before(async () => {
    s = await startServer();
    key = (await newAccount(s, { tokens: 100_000 })).key;
    client = new SandboxdClient({ apiKey: key, apiUrl: s.baseUrl });
  });
  after(() => s?.stop());

  it('reads SANDBOX_API_KEY and SANDBOX_API_URL: create, exec, publicUrl, setTimeout, list, delete', async () => {
    const saved = { key: process.env.SANDBOX_API_KEY, url: process.env.SANDBOX_API_URL };
    process.env.SANDBOX_API_KEY = key;
    process.env.SANDBOX_API_URL = s.baseUrl;
    let sb: Sandbox;
    try {
      sb = await Sandbox.create({ image: IMAGE, env: { GREETING: 'hello' }, timeoutMs: 120_000 });
    } finally {
      for (const [k, v] of [
        ['SANDBOX_API_KEY', saved.key],
        ['SANDBOX_API_URL', saved.url],
      ] as const) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
    assert.match(sb.id, /^sbx_[a-z2-7]{20}$/);
    assert.equal(sb.state, 'started');
    assert.equal(sb.image, IMAGE);
    assert.equal(sb.stopAt.getTime() - sb.createdAt.getTime(), 120_000);

    const r = await sb.exec('echo $GREETING');
    assert.deepEqual(r, { stdout: 'hello\n', stderr: '', exitCode: 0, success: true });
    const fail = await sb.exec('exit 3');
    assert.equal(fail.exitCode, 3);
    assert.equal(fail.success, false);
    const opts = await sb.exec('echo $GREETING; pwd', { env: { GREETING: 'over' }, cwd: '/tmp', timeoutMs: 10_000 });
    assert.equal(opts.stdout, 'over\n/tmp\n');
    const bg = await sb.exec('sleep 5', { background: true });
    assert.equal(typeof bg.pid, 'number');
    assert.equal(bg.exit, undefined);

    assert.equal(sb.publicUrl(3000), `http://3000-${sb.id}.sandbox.localhost:${s.port}`);
    assert.throws(() => sb.publicUrl(0), RangeError);

    const before = sb.stopAt.getTime();
    const stopAt = await sb.setTimeout(300_000);
    assert.ok(stopAt.getTime() > before);
    assert.equal(sb.stopAt.getTime(), stopAt.getTime());
    assert.equal((await sb.refresh()).stopAt, stopAt.toISOString());

    const listed = await Sandbox.list({ state: 'started' }, client);
    assert.ok(listed.some((x) => x.id === sb.id));
    const page = await client.sandboxes.listPage({ limit: 1 });
    assert.equal(page.sandboxes.length, 1);
    assert.deepEqual((await Sandbox.get(sb.id, client)).info, sb.info);

    await sb.delete();
    await assert.rejects(
      Sandbox.get(sb.id, client),
      (e: unknown) => e instanceof NotFoundError && e.status === 404 && e.code === 404,
    );
  });

  it('rebuilds typed errors from real answers: 400, 401, 402, 403, 404, 409, 413', async () => {
    const bad = await Sandbox.create({ image: IMAGE, volumes: { '/data': 'Bad-Name' } }, client).catch(
      (e: unknown) => e,
    );
    assert.ok(bad instanceof ValidationError, String(bad));
    assert.equal(bad.status, 400);
    assert.ok(
      bad.problems.some((p) => p.path.startsWith('/volumes')),
      JSON.stringify(bad.details),
    );

    const anon = new SandboxdClient({ apiKey: 'sk_not_a_real_key', apiUrl: s.baseUrl });
    await assert.rejects(Sandbox.list({}, anon), AuthenticationError);

    const template = await Sandbox.create({ image: 'local/no-such-image:1' }, client).catch((e: unknown) => e);
    assert.ok(template instanceof TemplateNotFoundError && template instanceof NotFoundError, String(template));
    assert.deepEqual(template.details, { image: 'local/no-such-image:1' });

    const broke = new SandboxdClient({ apiKey: (await newAccount(s, { tokens: 0 })).key, apiUrl: s.baseUrl });
    await assert.rejects(Sandbox.create({ image: IMAGE }, broke), InsufficientTokensError);

    const limited = new SandboxdClient({ apiKey: (await newAccount(s, { tokens: 100_000 })).key, apiUrl: s.baseUrl });
    const limit = (await limited.account.get()).limits.concurrency;
    const made: Sandbox[] = [];
    try {
      for (let i = 0; i < limit; i++) made.push(await Sandbox.create({ image: IMAGE }, limited));
      await assert.rejects(
        Sandbox.create({ image: IMAGE }, limited),
        (e: unknown) => e instanceof ConcurrencyLimitError && e.status === 403,
      );
    } finally {
      for (const m of made) await m.delete();
    }

    const sb = await Sandbox.create({ image: IMAGE }, client);
    const tooLong = await sb.setTimeout(10 * 3_600_000).catch((e: unknown) => e);
    assert.ok(tooLong instanceof ValidationError && /at most \d+/.test(tooLong.message), String(tooLong));
    await assert.rejects(sb.exec('x'.repeat(1_100_000)), PayloadTooLargeError);
    await sb.setTimeout(0);
    await assert.rejects(sb.exec('true'), (e: unknown) => e instanceof ConflictError && e.status === 409);
    await sb.delete();
  });

  it('volumes, account, keys and events', async () => {
    const sb = await Sandbox.create({ image: IMAGE, volumes: { '/data': { name: 'sdk_vol', sizeGb: 1 } } }, client);
    const vols = await client.volumes.list();
    assert.deepEqual(vols.find((v) => v.name === 'sdk_vol')?.mountedBy, [sb.id]);
    await assert.rejects(client.volumes.delete('sdk_vol'), ConflictError);
    await sb.delete();
    await client.volumes.delete('sdk_vol');
    assert.ok(!(await client.volumes.list()).some((v) => v.name === 'sdk_vol'));
    await assert.rejects(client.volumes.delete('sdk_vol'), NotFoundError);

    const account = await client.account.get();
    assert.equal(account.plan, 'FREE');
    assert.equal(typeof account.balance, 'number');

    const k = await client.keys.create('sdk-test');
    assert.match(k.key, /^sk_/);
    assert.ok((await client.keys.list()).some((x) => x.id === k.id && !('key' in x)));
    const other = new SandboxdClient({ apiKey: k.key, apiUrl: s.baseUrl });
    assert.equal((await other.account.get()).id, account.id);
    await client.keys.revoke(k.id);
    await assert.rejects(other.account.get(), AuthenticationError);

    await client.events.track('onboarding.started', { from: 'sdk-test' });
    await assert.rejects(client.events.track('onboarding.nope' as never), ValidationError);
  });

  it('images: admin only; pull and build stream progress; import uploads a tar', async () => {
    await assert.rejects(client.images.list(), NotFoundError);
    const admin = new SandboxdClient({ apiKey: ADMIN_KEY, apiUrl: s.baseUrl });
    assert.ok((await admin.images.list()).some((i) => i.ref === IMAGE));

    const seen: ImageProgress[] = [];
    const built = await admin.images.build('local/busybox:latest', { onProgress: (p) => seen.push(p) });
    assert.equal(built.ref, 'local/busybox:latest');
    assert.match(built.digest, /^sha256:[0-9a-f]{64}$/);
    assert.ok(seen.length > 0 && seen.every((p) => p.type === 'progress'));
    const junk = await admin.images.import(new Uint8Array([1, 2, 3]), { ref: 'x:1' }).catch((e: unknown) => e);
    assert.ok(junk instanceof ValidationError, String(junk));
    const dir = mkdtempSync(join(tmpdir(), 'sbx-image-'));
    try {
      let archive: Blob;
      if (RUNTIME === 'fake') {
        const pulled: ImageProgress[] = [];
        const img = await admin.images.pull('docker.io/library/alpine:3.20', { onProgress: (p) => pulled.push(p) });
        assert.equal(img.ref, 'docker.io/library/alpine:3.20');
        assert.ok(pulled.some((p) => p.phase === 'pulling' && typeof p.bytes === 'number'));
        assert.equal((await admin.images.pull('docker.io/library/alpine:3.21')).ref, 'docker.io/library/alpine:3.21');
        const missing = await admin.images
          .pull('example.com/notfound:1', { onProgress: () => {} })
          .catch((e: unknown) => e);
        assert.ok(missing instanceof TemplateNotFoundError, String(missing));
        const tar = new Uint8Array(1024);
        tar.set(new TextEncoder().encode('ustar'), 257);
        archive = new Blob([tar]);
      } else {
        // A real OCI archive: the layout of the busybox image this host built, as a tar.
        await run(
          'tar',
          [
            '-cf',
            join(dir, 'bb.tar'),
            '-C',
            join(TEST_IMAGE_DIR, 'layouts', 'busybox_latest'),
            'oci-layout',
            'index.json',
            'blobs',
          ],
          { cwd: dir },
        );
        archive = await openAsBlob(join(dir, 'bb.tar'));
      }
      assert.equal((await admin.images.import(archive, { ref: 'sdk/imported:1' })).ref, 'sdk/imported:1');
      const sb = await Sandbox.create({ image: 'sdk/imported:1' }, client);
      assert.equal((await sb.exec('echo imported')).stdout, 'imported\n');
      await sb.delete();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('terminals: type, see output, resize, list, exit with a code, close', async (t) => {
    const sb = await Sandbox.create({ image: IMAGE, env: { MARK: 'zz-output-zz' } }, client);
    try {
      const probe = await sb.terminals.list().catch((e: unknown) => e);
      if (probe instanceof NotFoundError && /route/i.test(probe.message))
        return t.skip('terminal routes are not served yet');
      const term = await sb.terminals.create({ cols: 100, rows: 30 });
      assert.match(term.id, /^term_[a-z2-7]{16}$/);
      assert.ok(term.pid > 0);
      let out = '';
      const dec = new TextDecoder();
      const waiters = new Set<() => void>();
      term.onData((c) => {
        out += dec.decode(c, { stream: true });
        for (const w of waiters) w();
      });
      const waitFor = (re: RegExp) =>
        new Promise<void>((resolve, reject) => {
          const check = () => {
            if (!re.test(out)) return;
            waiters.delete(check);
            clearTimeout(timer);
            resolve();
          };
          const timer = setTimeout(() => {
            waiters.delete(check);
            reject(new Error(`no ${re} in output: ${JSON.stringify(out.slice(-500))}`));
          }, 20_000);
          waiters.add(check);
          check();
        });

      term.write('echo $MARK\r');
      await waitFor(/zz-output-zz/);
      term.write('stty size\r');
      await waitFor(/30 100/);
      term.resize(120, 40);
      term.write('stty size\r');
      await waitFor(/40 120/);
      // Output that looks like a control message stays output (it arrives in binary frames).
      term.write('echo \'{"type":"exit","exitCode":9,"signal":null}\'\r');
      await waitFor(/"exitCode":9/);
      assert.equal(term.exit, undefined);

      const listed = await sb.terminals.list();
      assert.deepEqual(
        listed.find((x) => x.id === term.id),
        { id: term.id, shell: term.shell, status: 'active', clientCount: 1 },
      );
      const got = await sb.terminals.get(term.id);
      assert.equal(got.sandboxId, sb.id);

      let exitSeen: unknown;
      term.onExit((e) => (exitSeen = e));
      term.write('exit 3\r');
      assert.deepEqual(await term.wait(), { exitCode: 3, signal: null });
      assert.deepEqual(exitSeen, { exitCode: 3, signal: null });
      assert.throws(() => term.write('x'), SandboxdApiError);
      await term.close();
      await assert.rejects(sb.terminals.get(term.id), NotFoundError);

      await assert.rejects(sb.terminals.connect('term_aaaaaaaaaaaaaaaa'), NotFoundError);
      const second = await sb.terminals.create({ shell: 'sh' });
      await second.close();
      assert.ok(!(await sb.terminals.list()).some((x) => x.id === second.id));
    } finally {
      await sb.delete();
    }
  });

  it('onboarding: build and pack the SDK, install the tarball in a new project, run examples/hello.mjs', async () => {
    await run(process.execPath, ['--import', 'tsx', 'packages/sdk/scripts/build.ts'], { cwd: ROOT });
    const dir = mkdtempSync(join(tmpdir(), 'sbx-onboarding-'));
    try {
      await run('npm', ['pack', join(ROOT, 'packages/sdk/dist'), '--pack-destination', dir], { cwd: dir });
      const tarball = readdirSync(dir).find((f) => f.endsWith('.tgz'));
      assert.ok(tarball, 'npm pack made no tarball');
      const app = join(dir, 'app');
      await run('mkdir', [app], { cwd: dir });
      writeFileSync(
        join(app, 'package.json'),
        JSON.stringify({ name: 'hello-sandboxd', private: true, type: 'module' }),
      );
      await run('npm', ['install', '--offline', '--no-audit', '--no-fund', join(dir, tarball)], { cwd: app });
      copyFileSync(join(ROOT, 'examples/hello.mjs'), join(app, 'hello.mjs'));
      const { stdout } = await run(process.execPath, ['hello.mjs'], {
        cwd: app,
        env: { SANDBOX_API_KEY: key, SANDBOX_API_URL: s.baseUrl, SANDBOX_IMAGE: IMAGE },
      });
      const id = /^created (sbx_[a-z2-7]{20}) /m.exec(stdout)?.[1];
      assert.ok(id, stdout);
      assert.match(stdout, /^Hello from sandboxd!$/m);
      assert.match(stdout, /^exit code 0$/m);
      assert.match(stdout, new RegExp(`^deleted ${id}$`, 'm'));
      await assert.rejects(Sandbox.get(id, client), NotFoundError);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("from the clone, the machine's plain node runs examples/hello.mjs (the workspace SDK resolves to its build)", async (t) => {
    const node = userNode();
    t.diagnostic(`node: ${node}`);
    const { stdout } = await run(node, ['examples/hello.mjs'], {
      cwd: ROOT,
      env: { SANDBOX_API_KEY: key, SANDBOX_API_URL: s.baseUrl, SANDBOX_IMAGE: IMAGE },
    });
    const id = /^created (sbx_[a-z2-7]{20}) /m.exec(stdout)?.[1];
    assert.ok(id, stdout);
    assert.match(stdout, /^Hello from sandboxd!$/m);
    assert.match(stdout, new RegExp(`^deleted ${id}$`, 'm'));
  });

  it('errors are SandboxdApiError with status, code, message and details', async () => {
    const e = await Sandbox.get('sbx_aaaaaaaaaaaaaaaaaaaa', client).catch((x: unknown) => x);
    assert.ok(e instanceof SandboxdApiError);
    assert.equal(e.status, 404);
    assert.equal(e.code, 404);
    assert.equal(typeof e.message, 'string');
  });
});
