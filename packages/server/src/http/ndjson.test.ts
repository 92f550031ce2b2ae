/**
 * The NDJSON body of a streamed exec over the whole flow-controlled path, without a
 * runtime: a simulated exec agent (its output window, as native/exec-agent.c keeps it) →
 * AgentProcess → ProcessHost → followProcess. No clocks: the agent's frames come on
 * `setImmediate` turns, as I/O would, and the test waits on what the agent does.
 */
import assert from 'node:assert/strict';
import type { Readable } from 'node:stream';
import { describe, it } from 'node:test';
import { AgentProcess, type AgentLink } from '../runtime/local/commands/agent-process.js';
import { OUTPUT_WINDOW } from '../runtime/local/commands/exec-agent.js';
import { ProcessHost } from '../runtime/processes/host.js';
import { followProcess } from './ndjson.js';

const CHUNK = 64 * 1024;

/**
 * An exec agent running one streamed command that prints `total` bytes (chunk i filled with
 * the letter `i % 26`, so a lost, doubled or reordered chunk shows) and exits at once after
 * its last chunk, without waiting for acknowledgements (the real agent's EXIT follows the
 * pipes' EOF, not the server's ACK). It sends while less than its window is unacknowledged.
 */
class SimulatedAgent implements AgentLink {
  proc!: AgentProcess;
  sent = 0;
  unacked = 0;
  /** Most output in flight seen (sent, not yet acknowledged). */
  maxUnacked = 0;
  exited = false;
  private scheduled = false;
  private onStall: (() => void) | null = null;

  constructor(private readonly total: number) {}

  ack(_id: number, bytes: number): void {
    this.unacked -= bytes;
    this.schedule();
  }
  stdin(): void {}
  closeStdin(): void {}
  signal(): void {}

  /** Resolves once the agent wants to send but its window is full (the command is paused), or once it exited. */
  stalled(): Promise<void> {
    return new Promise((r) => {
      this.onStall = r;
      this.schedule();
    });
  }

  schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.pump();
    });
  }

  /** One turn of the agent's loop: a frame if the window allows, then the next turn. */
  private pump(): void {
    if (this.exited) return;
    if (this.sent >= this.total) {
      this.exited = true;
      this.proc.exited({ exitCode: 0, signal: null, timedOut: false });
      this.onStall?.(); // never paused: a waiter learns it too
      this.onStall = null;
      return;
    }
    if (this.unacked >= OUTPUT_WINDOW) {
      this.onStall?.();
      this.onStall = null;
      return; // the next ACK schedules a turn
    }
    const i = this.sent / CHUNK;
    const n = Math.min(CHUNK, this.total - this.sent);
    this.sent += n;
    this.unacked += n;
    this.maxUnacked = Math.max(this.maxUnacked, this.unacked);
    this.proc.output('stdout', Buffer.alloc(n, 0x61 + (i % 26)));
    this.schedule();
  }
}

/** A streamed exec of `total` bytes as an NDJSON body, and its agent. */
async function streamedExec(total: number): Promise<{ agent: SimulatedAgent; body: Readable }> {
  const agent = new SimulatedAgent(total);
  const host = new ProcessHost({
    spawn: async () => {
      agent.proc = new AgentProcess(agent, 1, 42, false);
      return agent.proc;
    },
    workingDir: async () => '/',
  });
  const p = await host.start('sbx', {
    argv: ['/bin/sh', '-c', 'x'],
    run: {},
    env: {},
    tag: null,
    startedAt: 0,
    held: true,
  });
  agent.schedule();
  const body = await followProcess((f, o) => host.follow('sbx', p.pid, f, o), { reconnect: false, follow: true });
  return { agent, body };
}

/** Reads the whole body, a turn of the event loop between reads (a slow client); checks each chunk's letter. */
async function readAll(body: Readable, total: number): Promise<{ lines: string[]; stdout: number }> {
  const lines: string[] = [];
  let stdout = 0;
  let buf = '';
  for await (const part of body) {
    buf += String(part);
    for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      const ev = JSON.parse(line) as { type: string; data?: string };
      if (ev.type === 'stdout') {
        const data = ev.data ?? '';
        // Chunks reach the reader as the process wrote them: chunk i is all one letter.
        const letter = String.fromCharCode(0x61 + ((stdout / CHUNK) % 26));
        assert.equal(data, letter.repeat(Math.min(CHUNK, total - stdout)), `chunk at byte ${stdout}`);
        stdout += data.length;
      } else lines.push(line);
    }
    await new Promise((r) => setImmediate(r));
  }
  assert.equal(buf, '', 'the body ends with a whole line');
  return { lines, stdout };
}

describe('followProcess (NDJSON body) over the agent window', { timeout: 60_000 }, () => {
  it('a reader that does not read pauses the producer (bounded in flight); every byte then arrives in order, the exit last', async () => {
    const total = 200 * CHUNK + 123;
    const { agent, body } = await streamedExec(total);
    // Nobody reads: the agent stops at its window, the body holds about its high-water mark.
    await agent.stalled();
    assert.ok(agent.sent < total / 4, `the producer went on: ${agent.sent} of ${total} bytes sent`);
    assert.ok(agent.maxUnacked <= OUTPUT_WINDOW + CHUNK, `${agent.maxUnacked} bytes in flight`);
    assert.ok(body.readableLength < 4 * CHUNK, `the body holds ${body.readableLength} bytes`);
    const { lines, stdout } = await readAll(body, total);
    assert.equal(agent.exited, true);
    assert.equal(stdout, total);
    assert.deepEqual(lines, ['{"type":"start","pid":42}', '{"type":"exit","exitCode":0,"signal":null}']);
  });

  it('an exit that comes while the last window is queued (paused) waits behind it', async () => {
    // Less than a window: the agent sends it all and exits before anybody reads.
    const total = 5 * CHUNK + 7;
    const { agent, body } = await streamedExec(total);
    while (!agent.exited) await new Promise((r) => setImmediate(r));
    const { lines, stdout } = await readAll(body, total);
    assert.equal(stdout, total);
    assert.deepEqual(lines, ['{"type":"start","pid":42}', '{"type":"exit","exitCode":0,"signal":null}']);
  });
});
