import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { CONFORMANCE_LIMITS, testId } from '../conformance.js';
import type { RuntimeDriver } from '../driver.js';
import type { ProcessExit } from '../spawn.js';
import type {
  DriverProcesses,
  FollowEvent,
  FollowOptions,
  ProcessFollower,
  ProcessFollowing,
  ProcessSpec,
} from './types.js';
import { eventually, rejectsWith, Waiters } from '../waiting.js';

/**
 * The behaviour every holder of tracked processes ({@link DriverProcesses}) shows, in this
 * process (`ProcessHost` next to a driver) or on a runner (`RemoteProcesses`, through any
 * number of replicas). Processes are driven with POSIX shell commands (busybox's do).
 */
export interface ProcessConformanceTarget {
  name: string;
  /**
   * A driver to make sandboxes with, and views of its tracked processes: one per API
   * replica (the suite starts through the first and reads through the last, which may be
   * the same).
   */
  make: () => Promise<{ driver: RuntimeDriver; views: DriverProcesses[] }>;
  destroy: () => Promise<void>;
  image: string;
}

/** A reader for tests: keeps the events; one that does not read answers false and lets its backlog grow. */
export class TestFollower implements ProcessFollower {
  events: FollowEvent[] = [];
  bytes = { stdout: 0, stderr: 0 };
  ended = false;
  lostReason: string | null = null;
  following: ProcessFollowing | null = null;
  private readonly waiters = new Waiters(() => `stdout ends ${JSON.stringify(this.text().slice(-300))}`);

  constructor(private reads = true) {}

  send(ev: FollowEvent): boolean {
    this.events.push(ev);
    if (ev.type === 'output') this.bytes[ev.stream] += ev.chunk.length;
    this.waiters.wake();
    return this.reads;
  }
  end(): void {
    this.ended = true;
    this.waiters.wake();
  }
  lost(reason: string): void {
    this.lostReason = reason;
    this.waiters.wake();
  }

  /** Starts reading: says it drained. */
  read(): void {
    this.reads = true;
    this.following?.drained();
  }

  /** What came on `stream`, as text. */
  text(stream: 'stdout' | 'stderr' = 'stdout'): string {
    return Buffer.concat(
      this.events.flatMap((e) => (e.type === 'output' && e.stream === stream ? [e.chunk] : [])),
    ).toString('latin1');
  }
  get exit(): ProcessExit | null {
    const e = this.events.find((x) => x.type === 'exit');
    return e?.type === 'exit' ? e.exit : null;
  }
  get received(): number {
    return this.bytes.stdout + this.bytes.stderr;
  }

  /** Resolves once `test()` holds (checked at each event), or rejects after `timeoutMs`. */
  until(what: string, test: () => boolean, timeoutMs = 30_000): Promise<void> {
    return this.waiters.until(what, test, timeoutMs);
  }
  /** Resolves once the reader ended (after `exit`, or after the replay). */
  done(): Promise<void> {
    return this.until('the end', () => this.ended || this.lostReason !== null);
  }
}

async function* chunks(...parts: Array<string | Buffer>): AsyncIterable<Uint8Array> {
  for (const p of parts) yield typeof p === 'string' ? Buffer.from(p) : p;
}

/** Registers the tracked-process conformance suite for `target` with node's test runner. */
export function runProcessConformance(target: ProcessConformanceTarget): void {
  describe(`DriverProcesses conformance: ${target.name}`, { timeout: 300_000 }, () => {
    let driver: RuntimeDriver;
    let a: DriverProcesses;
    let b: DriverProcesses;
    let sandboxId: string;
    const spec = (command: string, over: Partial<ProcessSpec> = {}): ProcessSpec => ({
      argv: ['/bin/sh', '-c', command],
      run: {},
      env: {},
      tag: null,
      startedAt: 1_700_000_000_000,
      held: false,
      ...over,
    });
    const follow = async (view: DriverProcesses, pid: number, f: TestFollower, o: Partial<FollowOptions> = {}) => {
      f.following = await view.follow(sandboxId, pid, f, { reconnect: false, follow: true, ...o });
      return f;
    };
    before(async () => {
      const made = await target.make();
      driver = made.driver;
      a = made.views[0];
      b = made.views.at(-1)!;
      sandboxId = testId('proc');
      await driver.create({ id: sandboxId, image: target.image, env: {}, volumes: [], limits: CONFORMANCE_LIMITS });
    });
    after(async () => {
      await a.closeSandbox(sandboxId).catch(() => undefined);
      await driver.delete(sandboxId).catch(() => undefined);
      await target.destroy();
    });

    it('start: listed with its spec and pid, through every view; unknown pids and sandboxes', async () => {
      const p = await a.start(
        sandboxId,
        spec('sleep 30', { run: { env: { A: 'b', HOME: '/x' }, cwd: '/tmp' }, env: { A: 'b' }, tag: 't1' }),
      );
      assert.ok(Number.isInteger(p.pid) && p.pid > 1);
      assert.deepEqual(
        { ...p, pid: 0 },
        {
          pid: 0,
          command: 'sleep 30',
          argv: ['/bin/sh', '-c', 'sleep 30'],
          env: { A: 'b' },
          tag: 't1',
          cwd: '/tmp',
          startedAt: 1_700_000_000_000,
          exit: null,
          stdinOpen: false,
        },
      );
      assert.deepEqual(await b.get(sandboxId, p.pid), p);
      assert.ok((await b.list(sandboxId)).some((x) => x.pid === p.pid));
      const plain = await a.start(sandboxId, spec('true'));
      assert.equal(plain.cwd, '/', "no cwd asked: the image's");
      assert.equal(await b.get('other_sandbox', p.pid), null, 'a process of another sandbox is not found');
      assert.deepEqual(await b.list('other_sandbox'), []);
      assert.equal(await b.get(sandboxId, 999_999), null);
      await rejectsWith(
        b.follow(sandboxId, 999_999, new TestFollower(), { reconnect: false, follow: true }),
        'not_found',
      );
      await rejectsWith(
        b.follow('other_sandbox', p.pid, new TestFollower(), { reconnect: false, follow: true }),
        'not_found',
      );
      await rejectsWith(b.writeStdin(sandboxId, 999_999, chunks('x')), 'not_found');
      await rejectsWith(b.closeStdin(sandboxId, 999_999), 'not_found');
      await rejectsWith(b.signal(sandboxId, 999_999, 'SIGTERM'), 'not_found');
      await rejectsWith(a.start(sandboxId, spec('true', { run: { user: 'no_such_user' } })), 'validation');
      await b.signal(sandboxId, p.pid, 'SIGKILL');
    });

    it('a reader through the other view gets start, output as it comes (stdout and stderr), exit; the process waits on nobody', async () => {
      const p = await a.start(
        sandboxId,
        spec('echo one; echo err >&2; read x; echo "got $x"; exit 3', { run: { stdin: true } }),
      );
      const f = await follow(b, p.pid, new TestFollower());
      await f.until('one', () => f.text().includes('one\n'));
      assert.deepEqual(f.events[0], { type: 'start', pid: p.pid });
      await b.writeStdin(sandboxId, p.pid, chunks('hel', 'lo\n'));
      await f.done();
      assert.equal(f.ended, true);
      assert.equal(f.text(), 'one\ngot hello\n');
      assert.equal(f.text('stderr'), 'err\n');
      assert.deepEqual(f.exit, { exitCode: 3, signal: null, timedOut: false });
      assert.equal(f.events.at(-1)?.type, 'exit');
      const gone = await a.get(sandboxId, p.pid);
      assert.deepEqual([gone?.exit?.exitCode, gone?.stdinOpen], [3, false]);
    });

    it('a reader that comes later (reconnect) gets replayFrom, everything kept and the exit; without follow it ends after what is kept', async () => {
      const p = await a.start(
        sandboxId,
        spec('seq 1 3000; read x; seq 3001 6000; exit 7', { run: { stdin: true }, tag: 'seq' }),
      );
      const first = await follow(a, p.pid, new TestFollower());
      await first.until('3000', () => first.text().includes('\n3000\n'));
      first.following?.detach();
      const peek = await follow(b, p.pid, new TestFollower(), { reconnect: true, follow: false });
      await peek.done();
      assert.deepEqual(peek.events[0], { type: 'start', pid: p.pid, replayFrom: { stdout: 0, stderr: 0 } });
      assert.equal(peek.exit, null, 'still running: no exit');
      assert.ok(peek.text().endsWith('\n3000\n'));
      await a.writeStdin(sandboxId, p.pid, chunks('go\n'));
      const again = await follow(b, p.pid, new TestFollower(), { reconnect: true });
      await again.done();
      const lines = again.text().trimEnd().split('\n');
      assert.equal(lines.length, 6000);
      assert.ok(lines.every((l, i) => l === String(i + 1)));
      assert.deepEqual(again.exit, { exitCode: 7, signal: null, timedOut: false });
      const late = await follow(a, p.pid, new TestFollower(), { replay: false });
      await late.done();
      assert.deepEqual(
        late.events.map((e) => e.type),
        ['start', 'exit'],
        'an exited process: start and exit, without the replay when asked',
      );
    });

    it('a held process waits for its first reader: it gets every byte even without the replay', async () => {
      const p = await a.start(sandboxId, spec('echo held-$((6*7)); echo e >&2', { held: true }));
      await new Promise((r) => setTimeout(r, 200));
      const f = await follow(b, p.pid, new TestFollower(), { replay: false });
      await f.done();
      assert.equal(f.text(), 'held-42\n');
      assert.equal(f.text('stderr'), 'e\n');
      assert.equal(f.exit?.exitCode, 0);
    });

    it('stdin: writes in order through either view, EOF on close; a large stdin arrives whole; closed or absent stdin is conflict', async () => {
      const p = await a.start(sandboxId, spec('wc -c', { run: { stdin: true } }));
      assert.equal(p.stdinOpen, true);
      const f = await follow(a, p.pid, new TestFollower());
      const block = Buffer.alloc(1 << 20, 0x61);
      await b.writeStdin(sandboxId, p.pid, chunks(block, block, block));
      await a.writeStdin(sandboxId, p.pid, [block]);
      await b.closeStdin(sandboxId, p.pid);
      await f.done();
      assert.equal(f.text().trim(), String(4 << 20));
      await rejectsWith(b.writeStdin(sandboxId, p.pid, chunks('late')), 'conflict');
      await rejectsWith(b.closeStdin(sandboxId, p.pid), 'conflict');
      const noStdin = await a.start(sandboxId, spec('sleep 30'));
      await rejectsWith(b.writeStdin(sandboxId, noStdin.pid, chunks('x')), 'conflict');
      await rejectsWith(b.closeStdin(sandboxId, noStdin.pid), 'conflict');
      const open = await a.start(sandboxId, spec('cat >/dev/null; sleep 30', { run: { stdin: true } }));
      await b.closeStdin(sandboxId, open.pid);
      await rejectsWith(a.writeStdin(sandboxId, open.pid, chunks('x')), 'conflict');
      await b.signal(sandboxId, noStdin.pid, 'SIGKILL');
      await b.signal(sandboxId, open.pid, 'SIGKILL');
    });

    it('signals reach the process through either view; an exited one is conflict', async () => {
      const p = await a.start(sandboxId, spec('sleep 30'));
      const f = await follow(a, p.pid, new TestFollower());
      await b.signal(sandboxId, p.pid, 'SIGTERM');
      await f.done();
      assert.deepEqual(f.exit, { exitCode: 143, signal: 'SIGTERM', timedOut: false });
      await rejectsWith(b.signal(sandboxId, p.pid, 'SIGKILL'), 'conflict');
      assert.equal((await b.get(sandboxId, p.pid))?.exit?.exitCode, 143);
    });

    it('a reader that does not read slows the process instead of buffering it; once it reads it gets every byte', async () => {
      const total = 40_000_000;
      // Held: unheld, it would run freely (the ring keeping its last 1 MiB) until the reader came.
      const p = await a.start(sandboxId, spec(`head -c ${total} /dev/zero | tr "\\0" a`, { held: true }));
      const slow = await follow(b, p.pid, new TestFollower(false));
      // Not reading: whatever the machine's speed, 40 MB cannot pass the windows in between.
      await new Promise((r) => setTimeout(r, 1500));
      assert.equal((await a.get(sandboxId, p.pid))?.exit, null, 'still running');
      assert.ok(slow.received < 16 << 20, `a reader that does not read got ${slow.received} bytes`);
      slow.read();
      await slow.done();
      assert.equal(slow.bytes.stdout, total);
      assert.equal(slow.exit?.exitCode, 0);
    });

    it('a reader that leaves does not stop the process; closeSandbox kills the running ones (their readers get exit) and forgets them', async () => {
      const p = await a.start(sandboxId, spec('i=0; while :; do i=$((i+1)); echo $i; sleep 0.05; done'));
      const gone = await follow(a, p.pid, new TestFollower());
      await gone.until('a line', () => gone.text().includes('\n'));
      gone.following?.detach();
      const f = await follow(b, p.pid, new TestFollower(), { replay: false });
      await f.until('output after the first reader left', () => f.text().includes('\n'));
      assert.equal((await a.get(sandboxId, p.pid))?.exit, null);
      await b.closeSandbox(sandboxId);
      await f.done();
      assert.deepEqual(f.exit, { exitCode: 137, signal: 'SIGKILL', timedOut: false });
      await eventually('forgotten', async () => (await a.list(sandboxId)).length === 0);
      assert.equal(await b.get(sandboxId, p.pid), null);
    });
  });
}
