/**
 * E2B's unchanged `e2b` SDK against sandboxd's envd `process.Process`: `sandbox.commands`
 * and `sandbox.pty` on real sandboxes (SANDBOXD_E2E_RUNTIME=local). The sandbox is made
 * with sandboxd's own API (it has no E2B template: its default user is the image's, root)
 * and reached with `Sandbox.connect`, as a user of both APIs would.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { CommandExitError, InvalidArgumentError, NotFoundError, Sandbox, TimeoutError } from 'e2b';
import { RUNTIME } from '../harness.js';
import { type E2bEnv, startE2b } from './support.js';

const IMAGE = 'local/debian:bookworm';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Resolves once `cond()` holds (polled), or fails after `ms`. */
async function until(cond: () => boolean | Promise<boolean>, ms = 10_000, what = 'condition'): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

describe('E2B SDK: commands and PTYs', { skip: RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local' }, () => {
  let env: E2bEnv;
  let id: string;
  let sbx: Sandbox;
  /** sandboxd's own API as the test's account. */
  const api = (method: string, path: string, body?: unknown) =>
    env.s.api(method, `/api/v1/sandboxes/${id}${path}`, { key: env.key, body });
  /** Processes named `name` in the sandbox (by /proc/<pid>/comm), via sandboxd's exec. */
  const countNamed = async (name: string) => {
    const r = await api('POST', '/exec', {
      command: `n=0; for f in /proc/[0-9]*/comm; do [ "$(cat $f 2>/dev/null)" = ${name} ] && n=$((n+1)); done; echo $n`,
    });
    assert.equal(r.status, 200, r.text);
    return Number(r.body.stdout.trim());
  };

  before(async () => {
    env = await startE2b();
    const c = await env.s.api('POST', '/api/v1/sandboxes', {
      key: env.key,
      body: { image: IMAGE, timeoutMs: 600_000 },
    });
    assert.equal(c.status, 201, c.text);
    id = c.body.sandbox.id;
    // A `user` account like E2B's templates have (the image may already carry one).
    const u = await api('POST', '/exec', {
      command: 'id -u user >/dev/null 2>&1 || useradd -m -u 1000 -s /bin/bash user',
    });
    assert.equal(u.body.exitCode, 0, u.text);
    sbx = await Sandbox.connect(id);
  });
  after(async () => {
    await env?.s.stop();
  });

  it('runs a command in the foreground: stdout, stderr, exit code', async () => {
    const r = await sbx.commands.run('echo out; echo err >&2');
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, 'out\n');
    assert.equal(r.stderr, 'err\n');
    assert.equal(r.error, undefined);
  });

  it('a non-zero exit throws CommandExitError with the code, the output and the status', async () => {
    await assert.rejects(sbx.commands.run('echo partial; echo bad >&2; exit 3'), (e: unknown) => {
      assert.ok(e instanceof CommandExitError, String(e));
      assert.equal(e.exitCode, 3);
      assert.equal(e.stdout, 'partial\n');
      assert.equal(e.stderr, 'bad\n');
      assert.equal(e.error, 'exit status 3');
      return true;
    });
  });

  it('calls onStdout / onStderr as output comes, before the command exits', async () => {
    const seen: Array<{ at: number; out?: string; err?: string }> = [];
    const started = Date.now();
    const r = await sbx.commands.run('for i in 1 2 3; do echo line$i; echo e$i >&2; sleep 0.4; done', {
      onStdout: (out) => {
        seen.push({ at: Date.now(), out });
      },
      onStderr: (err) => {
        seen.push({ at: Date.now(), err });
      },
    });
    const done = Date.now();
    assert.equal(r.stdout, 'line1\nline2\nline3\n');
    assert.equal(r.stderr, 'e1\ne2\ne3\n');
    assert.equal(seen.map((s) => s.out ?? '').join(''), r.stdout);
    assert.equal(seen.map((s) => s.err ?? '').join(''), r.stderr);
    assert.ok(seen[0].at - started < done - started - 500, 'the first line came long before the exit');
  });

  it('passes envs, runs in cwd, and as a login: HOME, USER, LOGNAME, the home as default cwd', async () => {
    const r = await sbx.commands.run('echo "$FOO|$(pwd)"', { envs: { FOO: 'bar baz' }, cwd: '/tmp' });
    assert.equal(r.stdout, 'bar baz|/tmp\n');
    const root = await sbx.commands.run('echo "$(id -un)|$HOME|$USER|$LOGNAME|$(pwd)"', { user: 'root' });
    assert.equal(root.stdout, 'root|/root|root|root|/root\n');
    const user = await sbx.commands.run('echo "$(id -un)|$(id -u)|$HOME|$USER|$LOGNAME|$(pwd)"', { user: 'user' });
    assert.equal(user.stdout, 'user|1000|/home/user|user|user|/home/user\n');
    // A relative cwd is under the user's home, as with envd.
    await sbx.commands.run('mkdir -p /home/user/proj', { user: 'user' });
    assert.equal((await sbx.commands.run('pwd', { user: 'user', cwd: 'proj' })).stdout, '/home/user/proj\n');
    // No user named: the sandbox's default (a sandbox made with sandboxd's API: the image's, root).
    assert.equal((await sbx.commands.run('id -un')).stdout, 'root\n');
  });

  it('refuses an unknown user and a missing cwd with InvalidArgumentError', async () => {
    await assert.rejects(sbx.commands.run('true', { user: 'nobody-here' }), (e: unknown) => {
      assert.ok(e instanceof InvalidArgumentError, String(e));
      assert.match(String((e as Error).message), /nobody-here/);
      return true;
    });
    await assert.rejects(sbx.commands.run('true', { cwd: '/does/not/exist' }), InvalidArgumentError);
  });

  it('timeoutMs: the command is killed at the deadline and the SDK throws TimeoutError', async () => {
    const t0 = Date.now();
    await assert.rejects(sbx.commands.run('sleep 37', { timeoutMs: 1000 }), (e: unknown) => {
      assert.ok(e instanceof TimeoutError, String(e));
      return true;
    });
    assert.ok(Date.now() - t0 < 10_000, 'rejected near the deadline');
    await until(async () => (await countNamed('sleep')) === 0, 10_000, 'the sleep to be killed');
    assert.ok(!(await sbx.commands.list()).some((p) => p.args.includes('sleep 37')));
  });

  it('background: a handle to wait on, listed while it runs, killed by the handle (then kill is false)', async () => {
    const quick = await sbx.commands.run('sleep 0.5; echo done', { background: true });
    assert.ok(quick.pid > 0);
    const res = await quick.wait();
    assert.equal(res.stdout, 'done\n');

    const h = await sbx.commands.run('sleep 300', { background: true, timeoutMs: 0, envs: { MARK: 'x' } });
    const listed = (await sbx.commands.list()).find((p) => p.pid === h.pid);
    assert.ok(listed, 'listed while it runs');
    assert.equal(listed.cmd, '/bin/bash');
    assert.deepEqual(listed.args, ['-l', '-c', 'sleep 300']);
    assert.deepEqual(listed.envs, { MARK: 'x' }, 'the envs asked for (as envd lists them)');
    assert.equal(listed.cwd, '/root');
    // One service layer: sandboxd's own API lists it too.
    const own = await api('GET', '/processes');
    assert.ok(own.body.processes.some((p: { pid: number; running: boolean }) => p.pid === h.pid && p.running));

    assert.equal(await h.kill(), true);
    await assert.rejects(h.wait(), (e: unknown) => {
      assert.ok(e instanceof CommandExitError, String(e));
      assert.equal(e.exitCode, -1);
      assert.equal(e.error, 'signal: killed');
      return true;
    });
    assert.equal(await sbx.commands.kill(h.pid), false);
    assert.ok(!(await sbx.commands.list()).some((p) => p.pid === h.pid));
  });

  it('stdin: sendStdin reaches the command, closeStdin ends its input', async () => {
    const chunks: string[] = [];
    const h = await sbx.commands.run('cat; echo "[eof]"', {
      background: true,
      stdin: true,
      onStdout: (d) => {
        chunks.push(d);
      },
    });
    await h.sendStdin('hello\n');
    await until(() => chunks.join('').includes('hello\n'), 10_000, 'the echo of stdin');
    await sbx.commands.sendStdin(h.pid, new TextEncoder().encode('again\n'));
    await h.closeStdin();
    const r = await h.wait();
    assert.equal(r.stdout, 'hello\nagain\n[eof]\n');
  });

  it('connect: a second client of a running command gets its later output and its exit', async () => {
    const h = await sbx.commands.run('read x; echo "got $x"; sleep 0.3; exit 4', {
      background: true,
      stdin: true,
      timeoutMs: 0,
    });
    await h.disconnect();
    const out: string[] = [];
    const again = await sbx.commands.connect(h.pid, { onStdout: (d) => void out.push(d) });
    assert.equal(again.pid, h.pid);
    await sbx.commands.sendStdin(h.pid, 'it\n');
    await assert.rejects(again.wait(), (e: unknown) => {
      assert.ok(e instanceof CommandExitError, String(e));
      assert.equal(e.exitCode, 4);
      assert.equal(e.stdout, 'got it\n');
      return true;
    });
    assert.equal(out.join(''), 'got it\n');
    await assert.rejects(sbx.commands.connect(h.pid), NotFoundError);
  });

  it('a client that goes without a deadline leaves the command running', async () => {
    const h = await sbx.commands.run('sleep 1.5; echo finished > /tmp/bg-done', { background: true, timeoutMs: 0 });
    await h.disconnect();
    await until(async () => (await sbx.commands.run('cat /tmp/bg-done 2>/dev/null || true')).stdout === 'finished\n');
  });

  it('pty: create with a size, type into it, resize, and kill', async () => {
    const out: Buffer[] = [];
    const text = () => Buffer.concat(out).toString('utf8');
    const pty = await sbx.pty.create({
      cols: 80,
      rows: 24,
      timeoutMs: 0,
      onData: (d) => {
        out.push(Buffer.from(d));
      },
    });
    assert.ok(pty.pid > 0);
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('echo "hi from $(id -un) in $PWD, $TERM"\n'));
    await until(() => text().includes('hi from root in /root, xterm-256color'), 10_000, 'the echo');
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size\n'));
    await until(() => text().includes('24 80'), 10_000, 'the first size');
    await sbx.pty.resize(pty.pid, { cols: 100, rows: 40 });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size\n'));
    await until(() => text().includes('40 100'), 10_000, 'the new size');

    // Listed by E2B, and a sandboxd terminal (one service layer).
    const listed = (await sbx.commands.list()).find((p) => p.pid === pty.pid);
    assert.deepEqual(listed && [listed.cmd, listed.args], ['/bin/bash', ['-i', '-l']]);
    const terms = await api('GET', '/terminals');
    assert.ok(
      terms.body.terminals.some((t: { status: string }) => t.status === 'active'),
      terms.text,
    );

    // A second client (pty.connect) sees what is typed from then on.
    const seen: Buffer[] = [];
    const second = await sbx.pty.connect(pty.pid, { onData: (d) => void seen.push(Buffer.from(d)), timeoutMs: 0 });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('echo second-$((6*7))\n'));
    await until(() => Buffer.concat(seen).toString().includes('second-42'), 10_000, 'output on the second client');

    assert.equal(await sbx.pty.kill(pty.pid), true);
    await assert.rejects(pty.wait(), (e: unknown) => e instanceof CommandExitError && e.exitCode === -1);
    await assert.rejects(second.wait(), CommandExitError);
    assert.equal(await sbx.pty.kill(pty.pid), false);
  });

  it('pty as another user, in a given cwd', async () => {
    const out: Buffer[] = [];
    const pty = await sbx.pty.create({
      cols: 80,
      rows: 24,
      user: 'user',
      cwd: '/tmp',
      envs: { GREETING: 'hey' },
      onData: (d) => void out.push(Buffer.from(d)),
    });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('echo "$GREETING $(id -un) $HOME $PWD"; exit 7\n'));
    await assert.rejects(pty.wait(), (e: unknown) => e instanceof CommandExitError && e.exitCode === 7);
    assert.match(Buffer.concat(out).toString(), /hey user \/home\/user \/tmp/);
  });

  it('unknown pids: kill is false, sendStdin and connect are NotFoundError', async () => {
    assert.equal(await sbx.commands.kill(999_999), false);
    await assert.rejects(sbx.commands.sendStdin(999_999, 'x'), NotFoundError);
    await assert.rejects(sbx.commands.connect(999_999), NotFoundError);
  });

  it("a wrong access token, or another account's sandbox, is refused", async () => {
    // The SDK's constructor, as Sandbox.connect calls it, with a token that is not the sandbox's.
    const Ctor = Sandbox as unknown as new (o: Record<string, unknown>) => Sandbox;
    const forged = new Ctor({ sandboxId: id, envdVersion: '0.5.7', envdAccessToken: 'ea_not-the-token' });
    await assert.rejects(forged.commands.run('true'), NotFoundError);
    await assert.rejects(forged.commands.list(), NotFoundError);
    await assert.rejects(forged.pty.create({ cols: 10, rows: 10, onData: () => {} }), NotFoundError);

    // Another account's sandbox: its id with our sandbox's token is not found.
    const other = await env.s.api('POST', '/api/v1/sandboxes', { body: { image: 'local/busybox:latest' } });
    assert.equal(other.status, 201, other.text);
    const stolen = new Ctor({
      sandboxId: other.body.sandbox.id,
      envdVersion: '0.5.7',
      envdAccessToken: (sbx as unknown as { envdAccessToken: string }).envdAccessToken,
    });
    await assert.rejects(stolen.commands.list(), NotFoundError);
    await assert.rejects(stolen.commands.run('true'), NotFoundError);
    await env.s.api('DELETE', `/api/v1/sandboxes/${other.body.sandbox.id}`);
  });

  it('keeps up with a lot of output (backpressure, nothing lost)', async () => {
    let bytes = 0;
    const r = await sbx.commands.run('head -c 8000000 /dev/zero | base64 -w 0; echo', {
      onStdout: (d) => {
        bytes += d.length;
      },
    });
    assert.equal(r.stdout.length, Math.ceil(8_000_000 / 3) * 4 + 1);
    assert.equal(bytes, r.stdout.length);
  });
});
