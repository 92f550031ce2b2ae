/**
 * What only the gVisor tier does (real runtime): pause to disk (a checkpoint: no host
 * process and no RAM while paused, adopted as paused by a restarted driver, every process
 * where it was after resume) and fork (processes and memory copied into new sandboxes, each
 * with its own address, hostname and writable layer). The shared conformance suite runs on
 * this tier in driver.test.ts.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { runscInstalled } from '../gvisor/runsc.js';
import { makeTestDriver } from '../../../test/local-driver.js';
import { CONFORMANCE_LIMITS, testId } from '../conformance.js';
import type { SandboxSpec } from '../driver.js';
import { rejectsWith } from '../waiting.js';
import { LocalDriver } from './driver.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
// /c is replaced whole (a rename), never seen empty: `echo > /c` truncates first, and a save
// that caught the loop between the truncation and the write restored an empty /c.
const COUNTER = 'i=0; while :; do i=$((i+1)); echo $i > /c.new; mv /c.new /c; sleep 0.1; done';

/** Host processes whose command line names sandbox `id` (runsc's sandbox and gofer do). */
function hostProcessesOf(id: string): string[] {
  const out = execFileSync('ps', ['-eo', 'args='], { encoding: 'utf8' });
  return out.split('\n').filter((l) => /runsc/.test(l) && l.includes(id));
}

describe('gVisor tier: memory snapshots', { skip: !runscInstalled() && 'no runsc of 2024 or later' }, () => {
  let driver: LocalDriver;
  let options: ConstructorParameters<typeof LocalDriver>[0];
  let dataDir = '';
  const spec = (over: Partial<SandboxSpec> = {}): SandboxSpec => ({
    id: testId('gv'),
    image: 'local/busybox:latest',
    env: { GREETING: 'hello' },
    volumes: [],
    limits: CONFORMANCE_LIMITS,
    isolation: 'gvisor',
    ...over,
  });
  const count = async (id: string) => Number((await driver.exec(id, 'cat /c')).stdout.trim());

  before(async () => {
    const made = makeTestDriver('gvmem', {});
    ({ driver, options, dataDir } = made);
    await driver.init();
    await driver.recover();
  });
  after(async () => {
    await driver.destroyAll();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('pauses to disk (no process left), is adopted paused by a restarted driver, and resumes every process where it was', async () => {
    const s = await driver.create(spec());
    await driver.execBackground(s.id, COUNTER);
    await sleep(500);
    await driver.pause(s.id, { memory: 'disk' });
    const paused = await driver.inspect(s.id);
    assert.equal(paused?.state, 'paused');
    assert.equal(paused?.pausedMemory, 'disk');
    assert.deepEqual(hostProcessesOf(s.id), [], 'no host process of the sandbox while paused to disk');
    const saved = Number(
      execFileSync('sh', ['-c', `du -sk ${join(dataDir, 'data', 'checkpoints', s.id)} | cut -f1`], {
        encoding: 'utf8',
      }),
    );
    assert.ok(saved > 0, 'the checkpoint is on disk');
    await rejectsWith(driver.exec(s.id, 'echo x'), 'conflict');
    await rejectsWith(driver.start(s.id, { limits: CONFORMANCE_LIMITS }), 'conflict');
    await driver.pause(s.id, { memory: 'disk' }); // paused already: no-op

    // The server's process restarts: a new driver on the same folders.
    await driver.close();
    driver = new LocalDriver(options);
    await driver.init();
    assert.ok((await driver.recover()).adopted.includes(s.id));
    assert.equal((await driver.inspect(s.id))?.pausedMemory, 'disk');

    await driver.resume(s.id);
    const resumed = await driver.inspect(s.id);
    assert.equal(resumed?.state, 'running');
    assert.equal(resumed?.pausedMemory, undefined);
    const first = await count(s.id);
    assert.ok(first > 0, 'the counter was restored, not started again (it would be missing or 1)');
    await sleep(400);
    assert.ok((await count(s.id)) > first, 'the restored loop goes on counting');
    assert.equal((await driver.exec(s.id, 'echo "$GREETING"')).stdout, 'hello\n');
    assert.ok(!existsSync(join(dataDir, 'data', 'checkpoints', s.id)), 'the checkpoint is gone once restored');
    await driver.delete(s.id);
  });

  it('a running gVisor sandbox is adopted by a restarted driver: its processes run on, commands work again', async () => {
    const s = await driver.create(spec());
    await driver.execBackground(s.id, COUNTER);
    await sleep(300);
    await driver.close();
    driver = new LocalDriver(options);
    await driver.init();
    assert.ok((await driver.recover()).adopted.includes(s.id));
    const adopted = await driver.inspect(s.id);
    assert.deepEqual([adopted?.state, adopted?.isolation], ['running', 'gvisor']);
    const n = await count(s.id);
    await sleep(300);
    assert.ok((await count(s.id)) > n, 'the loop it ran before goes on');
    assert.equal((await driver.exec(s.id, 'echo "$GREETING"')).stdout, 'hello\n');
    await driver.delete(s.id);
  });

  it('stops a sandbox paused to disk (its memory dropped, its files kept); delete removes its checkpoint', async () => {
    const s = await driver.create(spec());
    await driver.exec(s.id, 'echo kept > /kept.txt');
    await driver.execBackground(s.id, COUNTER);
    await driver.pause(s.id, { memory: 'disk' });
    await driver.stop(s.id);
    assert.equal((await driver.inspect(s.id))?.state, 'stopped');
    await driver.start(s.id, { limits: CONFORMANCE_LIMITS });
    assert.equal((await driver.exec(s.id, 'cat /kept.txt')).stdout, 'kept\n');
    const b = await driver.create(spec());
    await driver.pause(b.id, { memory: 'disk' });
    await driver.delete(b.id);
    assert.ok(!existsSync(join(dataDir, 'data', 'checkpoints', b.id)));
    await driver.delete(s.id);
  });

  it('refuses a pause to disk of a container sandbox and of one paused in memory', async () => {
    const c = await driver.create(spec({ isolation: 'container' }));
    await rejectsWith(driver.pause(c.id, { memory: 'disk' }), 'validation');
    await rejectsWith(driver.fork(c.id, [{ id: testId('fk') }]), 'validation');
    await driver.delete(c.id);
    const g = await driver.create(spec());
    await driver.pause(g.id);
    assert.equal((await driver.inspect(g.id))?.pausedMemory, 'ram');
    await rejectsWith(driver.pause(g.id, { memory: 'disk' }), 'conflict');
    await driver.delete(g.id);
  });

  it('pauses to disk while a TCP connection is open: the connection is dropped, the listener and the processes come back', async () => {
    const s = await driver.create(spec());
    // A listener that keeps its side of a connection open (nc closes its side when its stdin
    // ends), to be connected to; and a web server (busybox httpd), left idle, whose listening
    // socket the save keeps. (busybox's `nc -l` does not outlive a save: it ends.)
    await driver.execBackground(s.id, 'sleep 600 | nc -l -p 8000 > /dev/null');
    await driver.execBackground(s.id, 'mkdir -p /www && httpd -f -p 8001 -h /www');
    await driver.execBackground(s.id, COUNTER);
    let sock: Socket | undefined;
    for (let i = 0; i < 400 && !sock; i++) {
      sock = await new Promise<Socket | undefined>((resolve) => {
        const c = connect(8000, s.address, () => resolve(c));
        c.on('error', () => resolve(undefined));
      });
      if (!sock) await sleep(50);
    }
    assert.ok(sock, 'connected to the listener in the sandbox');
    const closed = new Promise<void>((resolve) => {
      sock!.on('close', () => resolve());
      sock!.on('error', () => undefined);
    });
    await driver.pause(s.id, { memory: 'disk' });
    assert.equal((await driver.inspect(s.id))?.pausedMemory, 'disk');
    await closed; // the save dropped it
    await driver.resume(s.id);
    const n = await count(s.id);
    assert.ok(n > 0);
    const back = (await driver.inspect(s.id))!.address;
    let again: Socket | undefined;
    for (let i = 0; i < 400 && !again; i++) {
      again = await new Promise<Socket | undefined>((resolve) => {
        const c = connect(8001, back, () => resolve(c));
        c.on('error', () => resolve(undefined));
      });
      if (!again) await sleep(50);
    }
    assert.ok(again, 'a restored listener accepts at the new address');
    again.destroy();
    await driver.delete(s.id);
  });

  it('forks: each fork goes on from the source state with its own address, hostname and files; the source runs on', async () => {
    const s = await driver.create(spec());
    await driver.exec(s.id, 'echo source > /f');
    await driver.execBackground(s.id, COUNTER);
    await sleep(500);
    const ids = [testId('fk'), testId('fk')];
    const forks = await driver.fork(
      s.id,
      ids.map((id) => ({ id })),
    );
    assert.deepEqual(
      forks.map((f) => [f.id, f.state, f.isolation]),
      ids.map((id) => [id, 'running', 'gvisor']),
    );
    const source = await driver.inspect(s.id);
    assert.equal(source?.state, 'running');
    const addresses = new Set([source!.address, ...forks.map((f) => f.address)]);
    assert.equal(addresses.size, 3, 'every sandbox has its own address');
    for (const id of ids) {
      const c = await driver.exec(id, 'cat /c');
      assert.ok(Number(c.stdout.trim()) > 0, `${id} goes on with the source's counter: ${JSON.stringify(c)}`);
      assert.equal((await driver.exec(id, 'hostname')).stdout, `${id}\n`);
      assert.equal((await driver.exec(id, 'cat /f; echo "$GREETING"')).stdout, 'source\nhello\n');
    }
    await driver.exec(ids[0], 'echo mine > /f');
    assert.equal((await driver.exec(ids[1], 'cat /f')).stdout, 'source\n', 'each fork has its own writable layer');
    assert.equal((await driver.exec(s.id, 'cat /f')).stdout, 'source\n');
    const before = await count(ids[1]);
    await sleep(400);
    assert.ok((await count(ids[1])) > before, "a fork's processes run");
    assert.ok((await count(s.id)) > 0, "the source's processes run");
    for (const id of [...ids, s.id]) await driver.delete(id);
  });

  it("ends a terminal's shell and what kept its PTY before a save (runsc could not restore them); the rest resumes", async () => {
    const s = await driver.create(spec());
    await driver.execBackground(s.id, COUNTER);
    /** A shell on a new PTY that has typed `line` and shown `want`; `exited` once the shell exits. */
    const shell = async (line: string, want: string) => {
      const pty = await driver.execTty(s.id, { argv: ['sh'], cols: 80, rows: 24 });
      const exited = new Promise<unknown>((resolve) => pty.onExit(resolve));
      let shown = '';
      pty.onData((c) => (shown += c));
      pty.write(line);
      for (let i = 0; i < 200 && !shown.includes(want); i++) await sleep(25);
      assert.ok(shown.includes(want), shown);
      return { exited };
    };
    // Children that keep the PTY: one in the shell's session, one in a session of its own.
    const { exited } = await shell('sleep 1001 & setsid sleep 1002 & echo st""arted\n', 'started');
    await driver.pause(s.id, { memory: 'disk' });
    await exited; // its clients see the shell end
    await driver.resume(s.id);
    assert.ok((await count(s.id)) > 0, 'the counter was restored');
    const ps = (await driver.exec(s.id, 'ps -o args')).stdout;
    assert.ok(!/sleep 100[12]/.test(ps), `what held the PTY ended:\n${ps}`);
    // A new terminal works, and the sandbox saves and restores again.
    await shell('echo ag""ain\n', 'again');
    await driver.pause(s.id, { memory: 'disk' });
    await driver.resume(s.id);
    assert.equal((await driver.exec(s.id, 'echo ok')).stdout, 'ok\n');
    await driver.delete(s.id);
  });

  it('saves and restores a sandbox whose PID 1 lost its channel in a restart (a second agent serves), twice', async () => {
    const s = await driver.create(spec());
    await driver.execBackground(s.id, COUNTER);
    await driver.close();
    driver = new LocalDriver(options);
    await driver.init();
    assert.ok((await driver.recover()).adopted.includes(s.id));
    assert.equal((await driver.exec(s.id, 'echo "$GREETING"')).stdout, 'hello\n'); // through a second agent
    for (let round = 0; round < 2; round++) {
      await driver.pause(s.id, { memory: 'disk' });
      await driver.resume(s.id);
      assert.ok((await count(s.id)) > 0, `round ${round}: the counter was restored`);
      assert.equal((await driver.exec(s.id, 'echo "$GREETING"')).stdout, 'hello\n');
      assert.deepEqual(
        (await driver.files.list(s.id, '/', { depth: 1 })).entries.some((e) => e.path === '/bin'),
        true,
      );
    }
    await driver.delete(s.id);
  });

  it('a command in flight at a save does not confuse the restored channel: every command after the resume gets its own answer', async () => {
    const s = await driver.create(spec());
    // Saved mid-way; after the restore it finishes, and its frames (its old id) come on the new channel.
    const inFlight = driver.exec(s.id, 'sleep 1; echo late').catch((e: Error) => e);
    await sleep(300);
    await driver.pause(s.id, { memory: 'disk' });
    await inFlight;
    await driver.resume(s.id);
    for (let i = 0; i < 8; i++) {
      assert.equal((await driver.exec(s.id, `echo n${i}`)).stdout, `n${i}\n`);
      assert.ok((await driver.files.list(s.id, '/', { depth: 1 })).entries.length > 3);
    }
    await driver.delete(s.id);
  });
});
