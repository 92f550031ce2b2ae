import assert from 'node:assert/strict';
import { once } from 'node:events';
import { test } from 'node:test';
import { spawn } from 'node:child_process';
import { readFileSync, readlinkSync } from 'node:fs';
import { hostname } from 'node:os';
import { connect, type Socket } from 'node:net';
import { HostSpawner, SpawnError } from './spawner.js';

const sp = new HostSpawner();
test.after(() => sp.close());

test('exit code, stdout and stderr kept apart', async () => {
  const r = await sp.run('sh', ['-c', 'echo out; echo err >&2; exit 3']);
  assert.deepEqual(
    [r.code, r.signal, r.timedOut, r.truncated, r.stdout.toString(), r.stderr.toString()],
    [3, 0, false, false, 'out\n', 'err\n'],
  );
});

test('input arrives on stdin, then EOF; 1 MiB round trip', async () => {
  const big = Buffer.alloc(1 << 20, 'abcdefgh');
  const r = await sp.run('cat', [], { input: big, maxOutputBytes: 2 << 20 });
  assert.equal(r.code, 0);
  assert.ok(r.stdout.equals(big));
  assert.equal((await sp.run('cat', [])).stdout.length, 0, 'no input: /dev/null');
});

test('output past maxOutputBytes is dropped and said', async () => {
  const r = await sp.run('sh', ['-c', 'head -c 100000 /dev/zero'], { maxOutputBytes: 1000 });
  assert.equal(r.stdout.length, 1000);
  assert.equal(r.truncated, true);
  assert.equal(r.code, 0);
});

test('a timeout kills the program, even when something it started holds its output', async () => {
  const r = await sp.run('sh', ['-c', 'sleep 30 & echo $!; exec sleep 30'], { timeoutMs: 200 });
  assert.equal(r.timedOut, true);
  assert.equal(r.signal, 9);
  assert.equal(r.code, -1);
  const orphan = Number(r.stdout.toString().trim());
  assert.ok(orphan > 0);
  process.kill(orphan, 'SIGKILL');
});

test('a program that cannot start is a SpawnError with its errno; nothing runs', async () => {
  await assert.rejects(
    sp.run('/nonexistent/program', []),
    (e: unknown) => e instanceof SpawnError && e.errno === 2 && /nonexistent/.test(e.message),
  );
  assert.equal((await sp.run('true', [])).code, 0, 'the spawner goes on');
});

test('programs get exactly fds 0-2, default signal handling and an empty mask', async () => {
  // grep reads its own status (exec, no fork): dash blocks every signal in itself while it
  // vforks a child, so a child reading the shell's status can catch that moment.
  const r = await sp.run('sh', ['-c', 'ls /proc/$$/fd; exec grep -E "^Sig(Blk|Ign)" /proc/self/status']);
  assert.deepEqual(r.stdout.toString().trim().split('\n'), [
    '0',
    '1',
    '2',
    'SigBlk:\t0000000000000000',
    'SigIgn:\t0000000000000000',
  ]);
});

test('quiet: output goes to /dev/null', async () => {
  const r = await sp.run('sh', ['-c', 'echo out; echo err >&2'], { quiet: true });
  assert.deepEqual([r.code, r.stdout.length, r.stderr.length], [0, 0, 0]);
});

test('channel: stdin and stdout are one socket to this process', async () => {
  const chunks: Buffer[] = [];
  let handed: (s: Socket) => void = () => undefined;
  const got = new Promise<Socket>((resolve) => {
    handed = resolve;
  });
  // The reader attaches inside the callback: data flows as soon as it returns.
  const r = sp.run('sh', ['-c', 'echo hello; read line; echo "got:$line"'], {
    channel: (s) => {
      s.on('data', (d) => chunks.push(d));
      handed(s);
    },
  });
  const sock = await got;
  for (let i = 0; i < 100 && !Buffer.concat(chunks).toString().includes('hello\n'); i++) await once(sock, 'data');
  sock.write('ping\n');
  await once(sock, 'close');
  assert.equal(Buffer.concat(chunks).toString(), 'hello\ngot:ping\n');
  assert.equal((await r).code, 0);
});

test('a connection to the channel socket without a token handed out for a spawn is closed', async () => {
  await sp.run('true', [], { channel: () => undefined }); // the socket exists from the first channel on
  const name = readFileSync('/proc/net/unix', 'utf8')
    .split('\n')
    .map((l) => l.trim().split(/\s+/)[7])
    .find((p) => p?.startsWith(`@sandboxd-spawner-${process.pid}-`))!
    .replace(/@+$/, '')
    .slice(1);
  const c = connect(`\0${name}`);
  c.on('error', () => undefined);
  await once(c, 'connect');
  c.write(Buffer.alloc(16, 7));
  await once(c, 'close');
  const again = await sp.run('echo', ['ok']);
  assert.equal(again.stdout.toString(), 'ok\n', 'the spawner goes on');
});

test('many at once, each answer to its own request', async () => {
  const rs = await Promise.all(Array.from({ length: 60 }, (_, i) => sp.run('sh', ['-c', `echo ${i}`])));
  assert.deepEqual(
    rs.map((r) => r.stdout.toString()),
    Array.from({ length: 60 }, (_, i) => `${i}\n`),
  );
});

test('a killed spawner fails what was in flight and is started again', async () => {
  const inFlight = sp.run('sleep', ['5']);
  const pid = sp.pid;
  assert.ok(pid > 0);
  process.kill(pid, 'SIGKILL');
  await assert.rejects(inFlight, /went away/);
  const r = await sp.run('echo', ['again']);
  assert.equal(r.stdout.toString(), 'again\n');
  assert.notEqual(sp.pid, pid);
});

test("sets the hostname of another process's UTS namespace, and stays in its own", async () => {
  const child = spawn('unshare', ['--uts', 'sleep', '30'], { stdio: 'ignore' });
  try {
    // The namespace exists once unshare made it (then it execs sleep).
    const own = readlinkSync('/proc/self/ns/uts');
    const theirs = () => {
      try {
        return readlinkSync(`/proc/${child.pid}/ns/uts`);
      } catch {
        return own;
      }
    };
    for (let i = 0; i < 500 && theirs() === own; i++) await new Promise((r) => setTimeout(r, 10));
    assert.notEqual(theirs(), own);
    await sp.setHostname(child.pid!, 'sbx-test-name');
    const inside = await sp.run('nsenter', [`--uts=/proc/${child.pid}/ns/uts`, 'hostname']);
    assert.equal(inside.stdout.toString().trim(), 'sbx-test-name');
    const outside = await sp.run('hostname', []);
    assert.equal(outside.stdout.toString().trim(), hostname(), "the spawner's programs keep the host's name");
    await assert.rejects(sp.setHostname(child.pid!, 'x'.repeat(65)), SpawnError);
  } finally {
    child.kill('SIGKILL');
  }
  await assert.rejects(
    sp.setHostname(2 ** 31 - 2, 'gone'),
    (e: SpawnError) => e instanceof SpawnError && e.errno === 2,
  );
});
