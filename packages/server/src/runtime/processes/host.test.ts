/** ProcessHost and TrackedProcess over scripted processes (no runtime): limits, eviction, hold, backpressure, replay. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PROCESS_REPLAY_BYTES, SandboxdError } from '@sandboxd/protocol';
import type { ProcessExit, SpawnOptions, StreamedProcess } from '../spawn.js';
import { TestFollower } from './conformance.js';
import { commandOf, ProcessHost } from './host.js';
import {
  MAX_EXITED_PROCESSES,
  MAX_FOLLOWERS_PER_PROCESS,
  MAX_FOLLOWERS_PER_SANDBOX,
  MAX_RUNNING_PROCESSES,
  type ProcessShares,
  type ProcessSpec,
} from './types.js';

/** A process whose output, exit and stdin the test drives; it records pauses, resumes and signals. */
class ScriptedProcess implements StreamedProcess {
  paused = false;
  pauses = 0;
  resumes = 0;
  signals: NodeJS.Signals[] = [];
  stdin: Buffer[] = [];
  stdinOpen: boolean;
  /** `write` answers false (stdin queued) until {@link drain}. */
  full = false;
  private data: ((s: 'stdout' | 'stderr', c: Buffer) => void) | null = null;
  private exits: Array<(e: ProcessExit) => void> = [];
  private drains: Array<() => void> = [];

  constructor(
    readonly pid: number,
    stdin = false,
  ) {
    this.stdinOpen = stdin;
  }
  onData(l: (s: 'stdout' | 'stderr', c: Buffer) => void): void {
    this.data = l;
  }
  /** Set once ended: a listener added later gets the exit at once (as the runtime's processes do). */
  ended: ProcessExit | null = null;
  onExit(l: (e: ProcessExit) => void): void {
    if (this.ended) l(this.ended);
    else this.exits.push(l);
  }
  pause(): void {
    if (!this.paused) this.pauses++;
    this.paused = true;
  }
  resume(): void {
    if (this.paused) this.resumes++;
    this.paused = false;
  }
  write(d: Uint8Array): boolean {
    if (!this.stdinOpen) return false;
    this.stdin.push(Buffer.from(d));
    return !this.full;
  }
  onDrain(l: () => void): void {
    this.drains.push(l);
  }
  closeStdin(): void {
    this.stdinOpen = false;
  }
  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    this.signals.push(signal);
  }
  /** The process writes `text` (delivered whatever `paused` says: the test checks what the host asked). */
  out(text: string | Buffer, stream: 'stdout' | 'stderr' = 'stdout'): void {
    this.data?.(stream, typeof text === 'string' ? Buffer.from(text) : text);
  }
  end(exitCode = 0, signal: string | null = null): void {
    this.stdinOpen = false;
    this.ended = { exitCode, signal, timedOut: false };
    for (const l of this.exits) l(this.ended);
  }
  drain(): void {
    this.full = false;
    for (const l of this.drains.splice(0)) l();
  }
}

/**
 * A host over scripted processes; `spawned` lists them in start order; `gate` holds spawns
 * until released. With `exitAtStart` every process has ended before the host tracks it.
 */
function scripted(o: { holdMaxMs?: number; shares?: ProcessShares; exitAtStart?: boolean } = {}) {
  const spawned: ScriptedProcess[] = [];
  let nextPid = 100;
  let gate: Promise<void> | null = null;
  const host = new ProcessHost({
    spawn: async (_id: string, _argv: string[], opts: SpawnOptions) => {
      if (gate) await gate;
      const p = new ScriptedProcess(nextPid++, opts.stdin === true);
      if (o.exitAtStart) p.end(0);
      spawned.push(p);
      return p;
    },
    workingDir: async () => '/work',
    holdMaxMs: o.holdMaxMs,
    shares: o.shares,
  });
  return {
    host,
    spawned,
    hold(): () => void {
      let open!: () => void;
      gate = new Promise((r) => (open = r));
      return () => {
        gate = null;
        open();
      };
    },
  };
}

const spec = (over: Partial<ProcessSpec> = {}): ProcessSpec => ({
  argv: ['/bin/sh', '-c', 'x'],
  run: {},
  env: {},
  tag: null,
  startedAt: 0,
  held: false,
  ...over,
});
const SB = 'sbx_unit';
const follow = { reconnect: false, follow: true };

describe('ProcessHost', () => {
  it(`runs at most ${MAX_RUNNING_PROCESSES} per sandbox (starts in flight count); an exited one frees its slot; other sandboxes are apart`, async () => {
    const { host, spawned, hold } = scripted();
    const open = hold();
    const starts = Array.from({ length: MAX_RUNNING_PROCESSES }, () => host.start(SB, spec()));
    await assert.rejects(host.start(SB, spec()), (e: unknown) => {
      assert.ok(e instanceof SandboxdError && e.kind === 'conflict');
      assert.match(e.message, /already runs 64 processes/);
      return true;
    });
    open();
    await Promise.all(starts);
    await assert.rejects(host.start(SB, spec()), { kind: 'conflict' });
    await host.start('sbx_other', spec());
    spawned[0].end(0);
    await host.start(SB, spec());
    assert.equal((await host.list(SB)).length, MAX_RUNNING_PROCESSES + 1);
  });

  it(`keeps the ${MAX_EXITED_PROCESSES} most recent exited processes; the oldest goes first`, async () => {
    const { host, spawned } = scripted();
    for (let i = 0; i < MAX_EXITED_PROCESSES + 3; i++) await host.start(SB, spec());
    const running = await host.start(SB, spec());
    for (const p of spawned.slice(0, -1)) p.end(0);
    const listed = await host.list(SB);
    assert.deepEqual(
      listed.map((p) => p.pid),
      spawned.slice(3).map((p) => p.pid),
      'oldest first',
    );
    assert.equal(listed.at(-1)?.pid, running.pid);
    assert.equal(listed.filter((p) => p.exit !== null).length, MAX_EXITED_PROCESSES);
    assert.equal(await host.get(SB, spawned[0].pid), null);
  });

  it('processes that ended before they were tracked are evicted too: the records stay within the exited share', async () => {
    const { host } = scripted({ exitAtStart: true });
    for (let i = 0; i < MAX_EXITED_PROCESSES * 4; i++) await host.start(SB, spec());
    assert.equal((await host.list(SB)).length, MAX_EXITED_PROCESSES);
    assert.equal(host.size, MAX_EXITED_PROCESSES);
  });

  it('the shares are configurable: running (409 naming it), exited kept; other sandboxes are apart', async () => {
    const shares = {
      runningProcessesPerSandbox: 2,
      exitedProcessesPerSandbox: 1,
      followersPerProcess: 1,
      followersPerSandbox: 1,
    };
    const { host, spawned } = scripted({ shares });
    await host.start(SB, spec());
    await host.start(SB, spec());
    await assert.rejects(host.start(SB, spec()), (e: SandboxdError) => {
      assert.equal(e.kind, 'conflict');
      assert.match(e.message, /already runs 2 processes/);
      assert.deepEqual(e.details, { running: 2, limit: 'runningProcessesPerSandbox', max: 2 });
      return true;
    });
    await host.start('sbx_other', spec());
    for (const p of spawned.slice(0, 2)) p.end(0);
    await host.start(SB, spec());
    assert.equal((await host.list(SB)).filter((p) => p.exit !== null).length, 1);
  });

  it(`readers: at most ${MAX_FOLLOWERS_PER_PROCESS} per process and ${MAX_FOLLOWERS_PER_SANDBOX} per sandbox (429 naming each); replays of an exited process are not counted; a reader that leaves frees its slot`, async () => {
    const { host, spawned } = scripted();
    const pids = [];
    for (let i = 0; i < MAX_FOLLOWERS_PER_SANDBOX / MAX_FOLLOWERS_PER_PROCESS + 1; i++)
      pids.push((await host.start(SB, spec())).pid);
    const follow = () => ({ reconnect: false, follow: true });
    const readers = [];
    for (let i = 0; i < MAX_FOLLOWERS_PER_PROCESS; i++)
      readers.push(await host.follow(SB, pids[0], new TestFollower(), follow()));
    await assert.rejects(host.follow(SB, pids[0], new TestFollower(), follow()), (e: SandboxdError) => {
      assert.equal(e.kind, 'rate_limited');
      assert.match(e.message, new RegExp(`already has ${MAX_FOLLOWERS_PER_PROCESS} readers`));
      assert.deepEqual(e.details, { limit: 'followersPerProcess', max: MAX_FOLLOWERS_PER_PROCESS });
      return true;
    });
    // Not following: a replay only, never counted.
    await host.follow(SB, pids[0], new TestFollower(), { reconnect: false, follow: false });
    for (const pid of pids.slice(1, -1))
      for (let i = 0; i < MAX_FOLLOWERS_PER_PROCESS; i++)
        readers.push(await host.follow(SB, pid, new TestFollower(), follow()));
    const last = pids.at(-1) as number;
    await assert.rejects(host.follow(SB, last, new TestFollower(), follow()), (e: SandboxdError) => {
      assert.equal(e.kind, 'rate_limited');
      assert.deepEqual(e.details, { limit: 'followersPerSandbox', max: MAX_FOLLOWERS_PER_SANDBOX });
      return true;
    });
    // A held start (a streamed exec) needs a reader: refused before anything is spawned.
    const before = spawned.length;
    await assert.rejects(host.start(SB, spec({ held: true })), { kind: 'rate_limited' });
    assert.equal(spawned.length, before);
    // Another sandbox is apart.
    const other = await host.start('sbx_other', spec({ held: true }));
    await host.follow('sbx_other', other.pid, new TestFollower(), follow());
    readers.shift()?.detach();
    await host.follow(SB, last, new TestFollower(), follow());
    // An exited process's readers end: their slots are free.
    spawned[0].end(0);
    await host.follow(SB, last, new TestFollower(), follow());
  });

  it('a sandbox closed while a start is in flight: the new process is killed and the start is conflict', async () => {
    const { host, spawned, hold } = scripted();
    const running = await host.start(SB, spec());
    const open = hold();
    const late = host.start(SB, spec());
    await host.closeSandbox(SB);
    open();
    await assert.rejects(late, { kind: 'conflict', message: /not running/ });
    assert.deepEqual(
      spawned.map((p) => p.signals),
      [['SIGKILL'], ['SIGKILL']],
    );
    assert.equal(await host.get(SB, running.pid), null);
    assert.equal(host.size, 0);
  });

  it('lists what it was given: command, listed env, tag, cwd (the image’s when none), startedAt; stdin rules', async () => {
    const { host, spawned } = scripted();
    const p = await host.start(
      SB,
      spec({
        argv: ['/bin/echo', 'a b'],
        run: { env: { HOME: '/h', A: '1' }, stdin: true },
        env: { A: '1' },
        tag: 't',
        startedAt: 5,
      }),
    );
    assert.deepEqual(p, {
      pid: 100,
      command: "/bin/echo 'a b'",
      argv: ['/bin/echo', 'a b'],
      env: { A: '1' },
      tag: 't',
      cwd: '/work',
      startedAt: 5,
      exit: null,
      stdinOpen: true,
    });
    const proc = spawned[0];
    proc.full = true;
    let written = false;
    const w = host.writeStdin(SB, p.pid, [Buffer.from('ab'), Buffer.from('cd')]).then(() => {
      written = true;
    });
    await new Promise((r) => setImmediate(r));
    assert.equal(written, false, 'waits for the process to take its stdin');
    proc.drain();
    await w;
    assert.equal(Buffer.concat(proc.stdin).toString(), 'abcd');
    await host.closeStdin(SB, p.pid);
    await assert.rejects(host.writeStdin(SB, p.pid, [Buffer.from('x')]), {
      kind: 'conflict',
      message: /stdin is closed/,
    });
    proc.end(2);
    await assert.rejects(host.signal(SB, p.pid, 'SIGTERM'), { kind: 'conflict', message: /has exited/ });
    await assert.rejects(host.closeStdin(SB, p.pid), { kind: 'conflict', message: /has exited/ });
    await assert.rejects(host.follow(SB, 1, new TestFollower(), follow), {
      kind: 'not_found',
      message: /No process 1 /,
    });
  });
});

describe('TrackedProcess (through ProcessHost)', () => {
  it('a held process stays paused until its first reader, or until the hold runs out', async () => {
    const { host, spawned } = scripted({ holdMaxMs: 50 });
    const a = await host.start(SB, spec({ held: true }));
    assert.equal(spawned[0].paused, true);
    const f = new TestFollower();
    f.following = await host.follow(SB, a.pid, f, follow);
    assert.equal(spawned[0].paused, false, 'the first reader lets it run');
    await host.start(SB, spec({ held: true }));
    assert.equal(spawned[1].paused, true);
    for (let i = 0; i < 200 && spawned[1].paused; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(spawned[1].paused, false, 'no reader came: it runs anyway');
  });

  it('pauses while any reader is behind, resumes once every blocked reader drained or left; a reader that keeps up gets everything', async () => {
    const { host, spawned } = scripted();
    const p = await host.start(SB, spec());
    const proc = spawned[0];
    const fast = new TestFollower();
    const slow = new TestFollower(false);
    const other = new TestFollower(false);
    fast.following = await host.follow(SB, p.pid, fast, follow);
    proc.out('one');
    assert.equal(proc.paused, false);
    slow.following = await host.follow(SB, p.pid, slow, follow);
    assert.equal(proc.paused, true, 'the replay to a reader that is behind pauses it');
    other.following = await host.follow(SB, p.pid, other, follow);
    proc.out('two');
    slow.read();
    assert.equal(proc.paused, true, 'another reader is still behind');
    other.following.detach();
    assert.equal(proc.paused, false, 'the last blocked reader left');
    proc.out('three', 'stderr');
    proc.end(4);
    for (const f of [fast, slow]) {
      assert.equal(f.text(), 'onetwo');
      assert.equal(f.text('stderr'), 'three');
      assert.deepEqual(f.exit, { exitCode: 4, signal: null, timedOut: false });
      assert.equal(f.ended, true);
    }
    assert.equal(other.exit, null, 'a reader that left is not told');
  });

  it('replays the last 1 MiB, saying per stream how much came before it', async () => {
    const { host, spawned } = scripted();
    const p = await host.start(SB, spec());
    spawned[0].out(Buffer.alloc(1000, 0x65), 'stderr');
    spawned[0].out(Buffer.alloc(PROCESS_REPLAY_BYTES, 0x6f));
    spawned[0].out('tail');
    const f = new TestFollower();
    f.following = await host.follow(SB, p.pid, f, { reconnect: true, follow: false });
    assert.deepEqual(f.events[0], { type: 'start', pid: p.pid, replayFrom: { stdout: 4, stderr: 1000 } });
    assert.equal(f.received, PROCESS_REPLAY_BYTES);
    assert.ok(f.text().endsWith('otail'));
    assert.equal(f.ended, true, 'without follow it ends after what is kept');
    assert.equal(f.exit, null);
  });

  it('a first reader that comes after output left the ring is told so (replayFrom), never silently short', async () => {
    // A streamed exec whose hold ran out before its reader came (a replica slow or gone meanwhile).
    const { host, spawned } = scripted({ holdMaxMs: 1 });
    const p = await host.start(SB, spec({ held: true }));
    for (let i = 0; i < 500 && spawned[0].paused; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(spawned[0].paused, false, 'the hold ran out');
    spawned[0].out(Buffer.alloc(PROCESS_REPLAY_BYTES, 0x6f));
    spawned[0].out('tail');
    const late = new TestFollower();
    late.following = await host.follow(SB, p.pid, late, follow);
    assert.deepEqual(late.events[0], { type: 'start', pid: p.pid, replayFrom: { stdout: 4, stderr: 0 } });
    assert.equal(late.received, PROCESS_REPLAY_BYTES);
    // Nothing dropped: `start` is as it always was (no replayFrom without a reconnect).
    const q = await host.start(SB, spec({ held: true }));
    const first = new TestFollower();
    first.following = await host.follow(SB, q.pid, first, follow);
    spawned[1].out('x');
    assert.deepEqual(first.events[0], { type: 'start', pid: q.pid });
  });
});

describe('commandOf', () => {
  it('lists /bin/sh -c commands by their command, other argv as a shell would read it', () => {
    assert.equal(commandOf(['/bin/sh', '-c', 'echo hi; exit 2']), 'echo hi; exit 2');
    assert.equal(commandOf(['/bin/bash', '-l', '-c', 'sleep 5']), "/bin/bash -l -c 'sleep 5'");
    assert.equal(commandOf(['/bin/echo', "it's", '', 'a=b']), "/bin/echo 'it'\\''s' '' a=b");
  });
});
