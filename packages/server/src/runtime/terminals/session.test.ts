import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pino from 'pino';
import type { ServerControlMessage } from '@sandboxd/protocol';
import type { PtyProcess } from '../pty.js';
import { RingBuffer } from './ring.js';
import {
  CLIENT_HIGH_WATER_BYTES,
  CLIENT_LOW_WATER_BYTES,
  CLIENT_MAX_BUFFER_BYTES,
  HANGUP_GRACE_MS,
  REPLAY_BYTES,
  TerminalSession,
} from './session.js';
import type { TerminalClient } from './types.js';

/** A PTY driven by the test: `emit` output, `exit` the process; records calls. */
class StubPty implements PtyProcess {
  pid = 7;
  paused = false;
  written: string[] = [];
  sizes: Array<[number, number]> = [];
  killed: string[] = [];
  private data: Array<(b: Buffer) => void> = [];
  private exits: Array<(e: { exitCode: number; signal: string | null }) => void> = [];
  /** What write answers: false means input is queued (the program is not reading). */
  accepts = true;
  private drains: Array<() => void> = [];
  write(d: string | Uint8Array) {
    this.written.push(Buffer.from(d).toString());
    return this.accepts;
  }
  onDrain(l: () => void) {
    this.drains.push(l);
  }
  drain() {
    this.accepts = true;
    for (const l of this.drains) l();
  }
  resize(c: number, r: number) {
    this.sizes.push([c, r]);
  }
  onData(l: (b: Buffer) => void) {
    this.data.push(l);
  }
  onExit(l: (e: { exitCode: number; signal: string | null }) => void) {
    this.exits.push(l);
  }
  pause() {
    this.paused = true;
  }
  resume() {
    this.paused = false;
  }
  kill(sig: NodeJS.Signals = 'SIGKILL') {
    this.killed.push(sig);
  }
  emit(s: string | Buffer) {
    for (const l of this.data) l(Buffer.from(s));
  }
  exit(exitCode: number, signal: string | null = null) {
    for (const l of this.exits) l({ exitCode, signal });
  }
}

/** A client whose "network" drains only when the test says so. */
class StubClient implements TerminalClient {
  out: Buffer[] = [];
  controls: ServerControlMessage[] = [];
  closed: { code: number; reason: string } | null = null;
  bufferedBytes = 0;
  constructor(private readonly reads: boolean) {}
  sendOutput(chunk: Buffer) {
    this.out.push(chunk);
    if (!this.reads) this.bufferedBytes += chunk.length;
  }
  sendControl(msg: ServerControlMessage) {
    this.controls.push(msg);
  }
  close(code: number, reason: string) {
    this.closed ??= { code, reason };
  }
  text() {
    return Buffer.concat(this.out).toString();
  }
}

const info = {
  id: 'term_aaaaaaaaaaaaaaaa',
  sandboxId: 'sbx_x',
  shell: 'bash' as const,
  createdAt: 0,
  argv: ['/bin/bash'],
  env: {},
  cwd: '/',
  tag: null,
  keepWhileIdle: false,
};
const make = () => {
  const pty = new StubPty();
  const changes: number[] = [];
  const s = new TerminalSession(info, pty, pino({ level: 'silent' }), (t) => changes.push(t.clientCount));
  return { pty, s, changes };
};

describe('RingBuffer', () => {
  it('keeps the last capacity bytes in order across wrap-around and oversized writes', () => {
    const r = new RingBuffer(8);
    assert.equal(r.snapshot().length, 0);
    r.write(Buffer.from('abc'));
    assert.equal(r.snapshot().toString(), 'abc');
    r.write(Buffer.from('defghij'));
    assert.equal(r.snapshot().toString(), 'cdefghij');
    r.write(Buffer.from('0123456789XY'));
    assert.equal(r.snapshot().toString(), '456789XY');
    r.write(Buffer.from('z'));
    assert.equal(r.snapshot().toString(), '56789XYz');
  });
});

describe('TerminalSession', () => {
  it('ready, then pre-attach output for the first client only; replay on request; same output to all; any may type', () => {
    const { pty, s } = make();
    pty.emit('$ ');
    const a = new StubClient(true);
    const ia = s.attach(a);
    assert.deepEqual(a.controls, [{ type: 'ready', pid: 7, shell: 'bash' }]);
    assert.equal(a.text(), '$ ', 'the first client gets the prompt printed before it came');
    const b = new StubClient(true);
    s.attach(b);
    assert.equal(b.text(), '', 'a later client gets no earlier output');
    const c = new StubClient(true);
    s.attach(c, { replay: true });
    assert.equal(c.text(), '$ ');
    ia.input('ls\r');
    pty.emit('file\r\n');
    assert.deepEqual(pty.written, ['ls\r']);
    for (const x of [a, b, c]) assert.ok(x.text().endsWith('file\r\n'));
    assert.equal(s.clientCount, 3);
  });

  it('resize accepts integers 1..1000 and ignores anything else', () => {
    const { pty, s } = make();
    const h = s.attach(new StubClient(true));
    h.resize(100, 40);
    for (const [c, r] of [
      [0, 10],
      [10, 1001],
      [1.5, 10],
      [NaN, 3],
      ['80', 24],
    ] as Array<[number, number]>)
      h.resize(c, r);
    assert.deepEqual(pty.sizes, [[100, 40]]);
  });

  it('exit goes to every client, then close 1000; a client of an exited terminal gets exit and close', () => {
    const { pty, s, changes } = make();
    const a = new StubClient(true);
    const b = new StubClient(true);
    s.attach(a);
    s.attach(b);
    pty.exit(3);
    for (const x of [a, b]) {
      assert.deepEqual(x.controls.at(-1), { type: 'exit', exitCode: 3, signal: null });
      assert.deepEqual(x.closed, { code: 1000, reason: 'shell exited' });
    }
    assert.equal(s.status, 'exited');
    assert.equal(changes.at(-1), 0);
    const late = new StubClient(true);
    s.attach(late);
    assert.deepEqual(late.controls, [{ type: 'exit', exitCode: 3, signal: null }]);
    assert.equal(late.closed?.code, 1000);
    assert.equal(s.clientCount, 0);
  });

  it('terminate hangs the shell up (SIGHUP, SIGKILL after a grace) and reports SIGHUP; a later PTY exit is ignored', async (t) => {
    t.mock.timers.enable({ apis: ['setTimeout'] });
    const { pty, s } = make();
    const a = new StubClient(true);
    s.attach(a);
    s.terminate('terminal deleted');
    assert.deepEqual(pty.killed, ['SIGHUP']);
    assert.deepEqual(a.controls.at(-1), { type: 'exit', exitCode: 129, signal: 'SIGHUP' });
    assert.deepEqual(a.closed, { code: 1000, reason: 'terminal deleted' });
    t.mock.timers.tick(HANGUP_GRACE_MS);
    assert.deepEqual(pty.killed, ['SIGHUP', 'SIGKILL'], 'still there after the grace');
    const second = make();
    second.s.terminate('idle');
    second.pty.exit(129, 'SIGHUP');
    t.mock.timers.tick(HANGUP_GRACE_MS);
    assert.deepEqual(second.pty.killed, ['SIGHUP'], 'gone in time: no SIGKILL');
    assert.deepEqual(s.exit, { exitCode: 129, signal: 'SIGHUP' });
  });

  it('a slow client is dropped with 1013 past 4 MiB while a fast one gets everything; the PTY never pauses for it', () => {
    const { pty, s } = make();
    const fast = new StubClient(true);
    const slow = new StubClient(false);
    s.attach(fast);
    s.attach(slow);
    const chunk = Buffer.alloc(64 * 1024, 0x79);
    const n = (CLIENT_MAX_BUFFER_BYTES / chunk.length) * 2;
    for (let i = 0; i < n; i++) {
      pty.emit(chunk);
      assert.equal(pty.paused, false);
    }
    assert.equal(Buffer.concat(fast.out).length, n * chunk.length);
    assert.equal(slow.closed?.code, 1013);
    assert.match(slow.closed!.reason, /too slow/);
    assert.ok(slow.bufferedBytes <= CLIENT_MAX_BUFFER_BYTES + chunk.length);
    assert.equal(s.clientCount, 1);
  });

  it('the PTY pauses only while every client is behind, and resumes when one catches up or leaves', () => {
    const { pty, s } = make();
    const a = new StubClient(false);
    const ha = s.attach(a);
    const chunk = Buffer.alloc(CLIENT_HIGH_WATER_BYTES / 4);
    for (let i = 0; i < 3; i++) pty.emit(chunk);
    assert.equal(pty.paused, false);
    pty.emit(chunk);
    assert.equal(pty.paused, true, 'its only client is 1 MiB behind');
    a.bufferedBytes = CLIENT_LOW_WATER_BYTES;
    ha.written();
    assert.equal(pty.paused, true, 'not yet below the low-water mark');
    a.bufferedBytes = CLIENT_LOW_WATER_BYTES - 1;
    ha.written();
    assert.equal(pty.paused, false);
    for (let i = 0; i < 4; i++) pty.emit(chunk);
    assert.equal(pty.paused, true);
    s.attach(new StubClient(true));
    assert.equal(pty.paused, false, 'a new client that keeps up lets output flow');
    ha.detach();
    assert.equal(s.clientCount, 1);
  });

  it('when every client is far behind nobody is dropped (the PTY pauses); the first to catch up gets the others dropped', () => {
    const { pty, s } = make();
    const a = new StubClient(false);
    const b = new StubClient(false);
    const ha = s.attach(a);
    s.attach(b);
    pty.emit(Buffer.alloc(CLIENT_MAX_BUFFER_BYTES * 2));
    assert.equal(pty.paused, true);
    assert.deepEqual([a.closed, b.closed], [null, null]);
    a.bufferedBytes = 0;
    ha.written();
    assert.equal(b.closed?.code, 1013);
    assert.equal(a.closed, null);
    assert.equal(pty.paused, false);
  });

  it('output with no client flows into the ring (64 KiB), never pauses', () => {
    const { pty, s } = make();
    for (let i = 0; i < 10; i++) pty.emit(Buffer.alloc(32 * 1024, 48 + i));
    assert.equal(pty.paused, false);
    const c = new StubClient(true);
    s.attach(c, { replay: true });
    assert.equal(c.text().length, REPLAY_BYTES);
    assert.equal(c.text().at(-1), '9');
  });

  it('input the program does not read pauses every client (and newcomers) until the PTY drains; exit resumes them', () => {
    const { pty, s } = make();
    const events: string[] = [];
    const client = (name: string) =>
      Object.assign(new StubClient(true), {
        pauseInput: () => events.push(`${name} paused`),
        resumeInput: () => events.push(`${name} resumed`),
      });
    const a = s.attach(client('a'));
    s.attach(client('b'));
    a.input('fits');
    assert.deepEqual(events, []);
    pty.accepts = false;
    a.input('x'.repeat(1 << 20));
    assert.deepEqual(events, ['a paused', 'b paused']);
    a.input('more'); // what a client sent before its pause took effect still goes to the PTY, once
    s.attach(client('c'));
    assert.deepEqual(events, ['a paused', 'b paused', 'c paused']);
    pty.drain();
    assert.deepEqual(events.slice(3), ['a resumed', 'b resumed', 'c resumed']);
    pty.accepts = false;
    a.input('again');
    pty.exit(0);
    assert.deepEqual(events.slice(6), ['a paused', 'b paused', 'c paused', 'a resumed', 'b resumed', 'c resumed']);
    assert.equal(pty.written.at(-1), 'again');
  });

  it('write (input of a caller that is not a client) resolves once the PTY took it; exit releases waiting writers', async () => {
    const { pty, s } = make();
    const events: string[] = [];
    s.attach(Object.assign(new StubClient(true), { pauseInput: () => events.push('paused') }));
    await s.write('ls\n');
    pty.accepts = false;
    let done = false;
    const w = s.write('big').then(() => {
      done = true;
    });
    await new Promise((r) => setImmediate(r));
    assert.equal(done, false);
    assert.deepEqual(events, ['paused']);
    pty.drain();
    await w;
    pty.accepts = false;
    const stuck = s.write('stuck');
    pty.exit(0);
    await stuck;
    await s.write('after exit'); // ignored, never hangs
    assert.deepEqual(pty.written, ['ls\n', 'big', 'stuck']);
  });

  it('resize and signal act on the PTY while it runs, not after', () => {
    const { pty, s } = make();
    s.resize(100, 40);
    s.resize(0, 40);
    s.signal('SIGTERM');
    pty.exit(143, 'SIGTERM');
    s.resize(90, 30);
    s.signal('SIGKILL');
    assert.deepEqual(pty.sizes, [[100, 40]]);
    assert.deepEqual(pty.killed, ['SIGTERM']);
  });

  it('a deadline kills the program (SIGKILL) when it still runs then; an exit before it clears it', (t) => {
    t.mock.timers.enable({ apis: ['setTimeout'] });
    const pty = new StubPty();
    const s = new TerminalSession(info, pty, pino({ level: 'silent' }), () => {}, { timeoutMs: 1000 });
    t.mock.timers.tick(999);
    assert.deepEqual(pty.killed, []);
    t.mock.timers.tick(1);
    assert.deepEqual(pty.killed, ['SIGKILL']);
    pty.exit(137, 'SIGKILL');
    assert.deepEqual(s.exit, { exitCode: 137, signal: 'SIGKILL' });

    const early = new StubPty();
    new TerminalSession(info, early, pino({ level: 'silent' }), () => {}, { timeoutMs: 1000 });
    early.exit(0);
    t.mock.timers.tick(5000);
    assert.deepEqual(early.killed, []);
  });
});
