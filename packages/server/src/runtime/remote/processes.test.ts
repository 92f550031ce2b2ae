/**
 * The tracked-process part of the runner protocol without a runtime: a RunnerServer whose
 * ProcessHost spawns scripted processes, reached by RemoteProcesses over loopback. Checks
 * the acknowledged output window (a reader on a replica that does not read pauses the
 * process on the runner; reading resumes it), replay and exit across the hop, and a
 * reader cut by the runner's shutdown (`lost`).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { RunnerServer } from '../../runner/server.js';
import { FakeDriver } from '../fake/driver.js';
import { TestFollower } from '../processes/conformance.js';
import { ProcessHost } from '../processes/host.js';
import type { ProcessSpec } from '../processes/types.js';
import type { ProcessExit, StreamedProcess } from '../spawn.js';
import { TerminalHost } from '../terminals/host.js';
import { RemoteDriver } from './driver.js';
import { FOLLOW_WINDOW_BYTES } from './wire.js';

const TOKEN = 'test-runner-token-processes-0123';
const log = pino({ level: 'silent' });

/** A process the test writes output for; it records whether the runner paused it. */
class Scripted implements StreamedProcess {
  paused = false;
  readonly stdinOpen = false;
  private data: ((s: 'stdout' | 'stderr', c: Buffer) => void) | null = null;
  private exits: Array<(e: ProcessExit) => void> = [];
  constructor(readonly pid: number) {}
  onData(l: (s: 'stdout' | 'stderr', c: Buffer) => void): void {
    this.data = l;
  }
  onExit(l: (e: ProcessExit) => void): void {
    this.exits.push(l);
  }
  pause(): void {
    this.paused = true;
  }
  resume(): void {
    this.paused = false;
  }
  write(): boolean {
    return false;
  }
  onDrain(): void {}
  closeStdin(): void {}
  kill(): void {}
  out(c: Buffer): void {
    this.data?.('stdout', c);
  }
  end(exitCode: number): void {
    for (const l of this.exits) l({ exitCode, signal: null, timedOut: false });
  }
}

const spec: ProcessSpec = { argv: ['/bin/x'], run: {}, env: {}, tag: null, startedAt: 0, held: false };
const SB = 'sbx_remote_unit';

describe('runner protocol: tracked processes (scripted, no runtime)', () => {
  const spawned: Scripted[] = [];
  let server: RunnerServer;
  let remote: RemoteDriver;
  before(async () => {
    const driver = new FakeDriver();
    let pid = 10;
    const processes = new ProcessHost({
      spawn: async () => {
        const p = new Scripted(pid++);
        spawned.push(p);
        return p;
      },
      workingDir: async () => '/',
    });
    const terminals = new TerminalHost({ execTty: (id, o) => driver.execTty(id, o), log });
    server = new RunnerServer({ driver, terminals, processes, token: TOKEN, nodeName: 'unit', tls: null, log });
    const url = await server.listen('127.0.0.1', 0);
    remote = new RemoteDriver({ url, token: TOKEN });
  });
  after(async () => {
    await remote.close();
    await server.close();
  });

  it('a reader that does not read pauses the process once a window is unacknowledged; reading resumes it and it gets every byte', async () => {
    const p = await remote.processes.start(SB, spec);
    const proc = spawned.at(-1)!;
    const slow = new TestFollower(false);
    slow.following = await remote.processes.follow(SB, p.pid, slow, { reconnect: false, follow: true });
    const chunk = Buffer.alloc(16 * 1024, 0x61);
    let written = 0;
    while (!proc.paused && written < 64 * FOLLOW_WINDOW_BYTES) {
      proc.out(chunk);
      written += chunk.length;
      await new Promise((r) => setImmediate(r));
    }
    assert.equal(proc.paused, true, `paused after ${written} bytes`);
    assert.ok(written <= FOLLOW_WINDOW_BYTES + chunk.length, `paused within the window (${written} bytes)`);
    await slow.until('what was sent', () => slow.received === written);
    slow.read();
    for (let i = 0; i < 500 && proc.paused; i++) await new Promise((r) => setTimeout(r, 5));
    assert.equal(proc.paused, false, 'resumed once the reader took its backlog');
    proc.out(Buffer.from('end'));
    proc.end(3);
    await slow.done();
    assert.equal(slow.received, written + 3);
    assert.deepEqual(slow.exit, { exitCode: 3, signal: null, timedOut: false });
    assert.equal(slow.lostReason, null);
  });

  it('a later reader with reconnect gets replayFrom, the kept output and the exit; get and list cross the hop', async () => {
    const p = await remote.processes.start(SB, { ...spec, tag: 'two' });
    const proc = spawned.at(-1)!;
    proc.out(Buffer.from('kept'));
    proc.end(0);
    const f = new TestFollower();
    f.following = await remote.processes.follow(SB, p.pid, f, { reconnect: true, follow: true });
    await f.done();
    assert.deepEqual(f.events[0], { type: 'start', pid: p.pid, replayFrom: { stdout: 0, stderr: 0 } });
    assert.equal(f.text(), 'kept');
    assert.equal(f.exit?.exitCode, 0);
    assert.equal((await remote.processes.get(SB, p.pid))?.tag, 'two');
    assert.ok((await remote.processes.list(SB)).some((x) => x.pid === p.pid && x.exit?.exitCode === 0));
  });

  it('a reader whose runner shuts down is lost (no exit)', async () => {
    const p = await remote.processes.start(SB, spec);
    const f = new TestFollower();
    f.following = await remote.processes.follow(SB, p.pid, f, { reconnect: false, follow: true });
    await f.until('start', () => f.events.length > 0);
    await server.close();
    await f.done();
    assert.match(String(f.lostReason), /lost the connection to runner/);
    assert.equal(f.exit, null);
  });
});
