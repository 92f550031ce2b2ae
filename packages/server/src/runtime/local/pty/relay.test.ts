/**
 * spawnTty against a real crun container (busybox rootfs made here). Needs root, crun and
 * busybox-static. Run: node --import tsx --test packages/server/src/runtime/local/pty/relay.test.ts
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import type { PtyProcess } from '../../driver.js';
import { spawnTty, type SpawnTtyOptions } from './relay.js';

const TOOLS = ['sh', 'stty', 'echo', 'sleep', 'cat', 'yes', 'head', 'kill', 'id', 'pwd', 'env', 'true'];
const tmp = mkdtempSync(join(tmpdir(), 'sbx-pty-test-'));
const state = join(tmp, 'state');
const id = `ptytest_${process.pid}`;
const crunArgv = ['crun', '--root', state];

/** Makes a busybox bundle and starts it with `crun run -d` (host workaround included). */
function startContainer(): void {
  const bundle = join(tmp, 'bundle');
  mkdirSync(join(bundle, 'rootfs/bin'), { recursive: true });
  for (const d of ['proc', 'dev', 'sys', 'tmp']) mkdirSync(join(bundle, 'rootfs', d));
  copyFileSync('/bin/busybox', join(bundle, 'rootfs/bin/busybox'));
  for (const t of TOOLS) symlinkSync('busybox', join(bundle, 'rootfs/bin', t));
  execFileSync('crun', ['spec'], { cwd: bundle });
  const config = JSON.parse(readFileSync(join(bundle, 'config.json'), 'utf8'));
  config.process.terminal = false;
  config.process.args = ['sleep', '3600'];
  config.root.readonly = false;
  config.linux.namespaces = config.linux.namespaces.filter((n: { type: string }) => n.type !== 'network');
  writeFileSync(join(bundle, 'config.json'), JSON.stringify(config));
  execFileSync(
    'unshare',
    [
      '-m',
      '--propagation',
      'private',
      'sh',
      '-c',
      `umount /sys/fs/cgroup/unified 2>/dev/null; exec crun --root ${state} run -d -b ${bundle} ${id} </dev/null >/dev/null 2>&1`,
    ],
    { timeout: 20_000 },
  );
}

const opts = (o: Partial<SpawnTtyOptions> = {}): SpawnTtyOptions => ({
  crunArgv,
  containerId: id,
  argv: ['sh'],
  cols: 100,
  rows: 40,
  ...o,
});

/** Collects output; `until` waits (bounded) for a pattern. */
function collect(p: PtyProcess) {
  let text = '';
  p.onData((c) => {
    text += c.toString('latin1');
  });
  return {
    get text() {
      return text;
    },
    until: async (re: RegExp, ms = 5000) => {
      const end = Date.now() + ms;
      while (!re.test(text)) {
        if (Date.now() > end) throw new Error(`timed out waiting for ${re}; got ${JSON.stringify(text.slice(-300))}`);
        await new Promise((r) => setTimeout(r, 5));
      }
    },
  };
}

function exitOf(p: PtyProcess, ms = 10_000): Promise<{ exitCode: number; signal: string | null }> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('no exit')), ms);
    p.onExit((e) => {
      clearTimeout(t);
      resolve(e);
    });
  });
}

describe('spawnTty (crun + tty-relay)', () => {
  before(startContainer);
  after(() => {
    try {
      execFileSync('crun', ['--root', state, 'delete', '-f', id], { stdio: 'ignore', timeout: 10_000 });
    } catch {}
    rmSync(tmp, { recursive: true, force: true });
  });

  it('echoes input and reports the in-sandbox pid', async () => {
    const p = await spawnTty(opts());
    const out = collect(p);
    p.write('echo hi; echo pid=$$\n');
    await out.until(/\r\nhi\r\n/);
    await out.until(new RegExp(`pid=${p.pid}\\r\\n`));
    assert.ok(p.pid > 1);
    p.write('exit\n');
    assert.deepEqual(await exitOf(p), { exitCode: 0, signal: null });
  });

  it('applies the initial size before the first input, every time', async () => {
    for (let i = 0; i < 15; i++) {
      const p = await spawnTty(opts({ cols: 91 + i, rows: 33 }));
      p.write('stty size; exit\n'); // right away, before any prompt
      const out = collect(p);
      await exitOf(p);
      assert.match(out.text, new RegExp(`\\r\\n33 ${91 + i}\\r\\n`));
    }
  });

  it('resizes: stty size and a SIGWINCH trap see the new size', async () => {
    const p = await spawnTty(opts());
    const out = collect(p);
    p.resize(120, 50);
    p.write('stty size\n');
    await out.until(/\r\n50 120\r\n/);
    p.kill();
    await exitOf(p);

    const q = await spawnTty(
      opts({ argv: ['sh', '-c', 'trap "echo WINCH \\$(stty size)" WINCH; echo READY; while :; do sleep 0.05; done'] }),
    );
    const qo = collect(q);
    await qo.until(/READY/);
    q.resize(132, 43);
    await qo.until(/WINCH 43 132/);
    q.resize(80, 24);
    await qo.until(/WINCH 24 80/);
    q.kill('SIGTERM');
    assert.deepEqual(await exitOf(q), { exitCode: 143, signal: 'SIGTERM' });
  });

  it('passes env, cwd and user; leaks no ignored signals into the sandbox', async () => {
    const cmd = 'echo "u=$(id -u):$(id -g) d=$(pwd) foo=$FOO"';
    const p = await spawnTty(
      opts({ argv: ['sh', '-c', cmd], env: { PATH: '/bin', FOO: 'b a r' }, cwd: '/tmp', user: '1000:1000' }),
    );
    const out = collect(p);
    await exitOf(p);
    assert.match(out.text, /u=1000:1000 d=\/tmp foo=b a r/);
    const q = await spawnTty(opts({ argv: ['cat', '/proc/self/status'] }));
    const qo = collect(q);
    await exitOf(q);
    assert.match(qo.text, /SigIgn:\s+0+\r\n/); // the relay ignores SIGPIPE; the sandbox must not
  });

  it('reports exit codes and signals apart', async () => {
    // onExit waits until all output is taken by an onData listener, hence collect()
    const run = async (argv: string[]) => {
      const p = await spawnTty(opts({ argv }));
      collect(p);
      return exitOf(p);
    };
    assert.deepEqual(await run(['sh', '-c', 'exit 3']), { exitCode: 3, signal: null });
    assert.deepEqual(await run(['sh', '-c', 'exit 137']), { exitCode: 137, signal: null });
    assert.deepEqual(await run(['sh', '-c', 'kill -9 $$']), { exitCode: 137, signal: 'SIGKILL' });
    const p = await spawnTty(opts());
    const out = collect(p);
    p.write('echo $$\n');
    await out.until(new RegExp(`\\r\\n${p.pid}\\r\\n`));
    p.write('kill -9 $$\n');
    assert.deepEqual(await exitOf(p), { exitCode: 137, signal: 'SIGKILL' });
    const q = await spawnTty(opts());
    collect(q);
    q.kill('SIGKILL');
    assert.deepEqual(await exitOf(q), { exitCode: 137, signal: 'SIGKILL' });
    q.kill(); // after exit: a no-op
  });

  it('keeps output produced before onData', async () => {
    const p = await spawnTty(opts({ argv: ['sh', '-c', 'echo early; sleep 0.2; echo late'] }));
    await new Promise((r) => setTimeout(r, 100));
    const out = collect(p);
    await exitOf(p);
    assert.match(out.text, /^early\r\nlate\r\n$/);
  });

  it('onExit waits for output held by pause()', async () => {
    const p = await spawnTty(opts({ argv: ['sh', '-c', 'echo one; echo two'] }));
    p.pause();
    const events: string[] = [];
    p.onData((c) => events.push(c.toString()));
    p.onExit((e) => events.push(`exit ${e.exitCode}`));
    await new Promise((r) => setTimeout(r, 400)); // the process is long gone
    assert.deepEqual(events, []);
    p.resume();
    await exitOf(p);
    assert.equal(events.join(''), 'one\r\ntwo\r\nexit 0');
  });

  it('rejects clearly when the executable is missing', async () => {
    await assert.rejects(spawnTty(opts({ argv: ['nosuchcmd', '-x'] })), (e: unknown) => {
      assert.ok(e instanceof SandboxdError);
      assert.equal(e.kind, 'validation');
      assert.match(e.message, /`nosuchcmd`.*not found/);
      return true;
    });
    await assert.rejects(spawnTty(opts({ cwd: '/nonexistent' })), /chdir `\/nonexistent`: No such file/);
    await assert.rejects(
      spawnTty(opts({ containerId: 'no_such_container' })),
      /cannot start `sh` in sandbox no_such_container/,
    );
    await assert.rejects(spawnTty(opts({ cols: 0 })), /cols and rows/);
  });

  it('delivers 50 MB complete; pause() blocks the relay, memory stays bounded', async () => {
    // `| cat`: busybox head writes one line per syscall on a tty (~1 MB/s); cat writes blocks
    const p = await spawnTty(opts({ argv: ['sh', '-c', 'yes | head -c 50000000 | cat'] }));
    let bytes = 0;
    let ys = 0;
    p.onData((c) => {
      bytes += c.length;
      for (let i = c.indexOf(121); i >= 0; i = c.indexOf(121, i + 1)) ys++;
    });
    const exit = exitOf(p, 60_000);
    await new Promise((r) => setTimeout(r, 50));
    p.pause();
    await new Promise((r) => setImmediate(r));
    const atPause = bytes;
    const mem0 = process.memoryUsage();
    await new Promise((r) => setTimeout(r, 1500));
    const mem1 = process.memoryUsage();
    assert.equal(bytes, atPause, 'no data while paused');
    assert.ok(
      mem1.arrayBuffers - mem0.arrayBuffers < 8 << 20,
      `arrayBuffers grew ${mem1.arrayBuffers - mem0.arrayBuffers}`,
    );
    assert.ok(mem1.rss - mem0.rss < 32 << 20, `rss grew ${mem1.rss - mem0.rss}`);
    p.resume();
    assert.deepEqual(await exit, { exitCode: 0, signal: null });
    assert.equal(ys, 25_000_000);
    assert.equal(bytes, 75_000_000); // "y\n" -> "y\r\n" (onlcr)
  });
});
