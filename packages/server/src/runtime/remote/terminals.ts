import type { ServerControlMessage } from '@sandboxd/protocol';
import type { RawData } from 'ws';
import {
  CLOSE,
  type DriverTerminals,
  type TerminalAttachment,
  type TerminalClient,
  type TerminalSpec,
  type TerminalState,
} from '../terminals/types.js';
import type { RunnerClient } from './client.js';
import { SocketHeartbeat } from './heartbeat.js';
/** Close codes of the runner's terminal socket that are passed on to the client as they are. */
const PASSED_ON = new Set<number>([CLOSE.normal, CLOSE.goingAway, CLOSE.tooSlow]);

/**
 * The terminals of a runner, reached over the runner protocol (`runner/terminals.ts`):
 * create, list, get, delete, input, resize, signal and closeSandbox are unary calls, and
 * each client attachment is one WebSocket to the runner that relays output (binary
 * frames), `ready`/`exit` (text frames, as the client gets them) and the runner's close
 * code one way, input, resizes and acknowledgements the other. Acknowledgements say how
 * much output the client has handed to its network (what it received less its
 * `bufferedBytes`), so the runner's fan-out sees each remote client as far behind as it
 * really is: its flow control (pause the PTY while every client is behind, close one more
 * than 4 MiB behind with 1013) works across replicas, and the bytes in flight for one client
 * stay bounded. A socket to the runner that breaks closes its client with 1011: the
 * terminal itself lives on (reconnect through any replica).
 */
export class RemoteTerminals implements DriverTerminals {
  /** Sockets to the runner are pinged; one that missed the previous pong is cut (its clients get 1011). */
  private readonly heartbeat = new SocketHeartbeat();

  constructor(private readonly runner: RunnerClient) {}

  create(sandboxId: string, spec: TerminalSpec): Promise<TerminalState> {
    return this.runner.call('terminals.create', [sandboxId, spec]);
  }
  list(sandboxId: string): Promise<TerminalState[]> {
    return this.runner.call('terminals.list', [sandboxId]);
  }
  get(sandboxId: string, terminalId: string): Promise<TerminalState | null> {
    return this.runner.call('terminals.get', [sandboxId, terminalId]);
  }
  async delete(sandboxId: string, terminalId: string, reason?: string): Promise<void> {
    await this.runner.call('terminals.delete', [sandboxId, terminalId, reason]);
  }
  async input(sandboxId: string, terminalId: string, data: Uint8Array): Promise<void> {
    await this.runner.call('terminals.input', [sandboxId, terminalId, Buffer.from(data).toString('base64')]);
  }
  async resize(sandboxId: string, terminalId: string, cols: number, rows: number): Promise<void> {
    await this.runner.call('terminals.resize', [sandboxId, terminalId, cols, rows]);
  }
  async signal(sandboxId: string, terminalId: string, signal: NodeJS.Signals): Promise<void> {
    await this.runner.call('terminals.signal', [sandboxId, terminalId, signal]);
  }
  async closeSandbox(sandboxId: string, reason: string): Promise<void> {
    await this.runner.call('terminals.closeSandbox', [sandboxId, reason]);
  }

  async attach(
    sandboxId: string,
    terminalId: string,
    client: TerminalClient,
    opts: { replay?: boolean } = {},
  ): Promise<TerminalAttachment> {
    let opened = false;
    let left = false;
    let received = 0;
    let acked = 0;
    let ackScheduled = false;
    const message = (data: RawData, isBinary: boolean) => {
      if (left) return;
      const buf = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
      if (isBinary) {
        received += buf.length;
        client.sendOutput(buf);
        return;
      }
      let msg: { type?: string };
      try {
        msg = JSON.parse(buf.toString('utf8'));
      } catch {
        return;
      }
      if (msg.type === 'input.pause') client.pauseInput?.();
      else if (msg.type === 'input.resume') client.resumeInput?.();
      else if (msg.type === 'ready' || msg.type === 'exit') client.sendControl(msg as ServerControlMessage);
    };
    const ws = await this.runner.socket('terminal', {
      query: { sandbox: sandboxId, terminal: terminalId, replay: opts.replay ? '1' : '0' },
      setup: (s) => {
        s.on('message', message);
        s.on('error', () => s.terminate());
        s.on('pong', () => this.heartbeat.pong(s));
        s.on('close', (code: number, reason: Buffer) => {
          if (!opened || left) return;
          left = true;
          if (PASSED_ON.has(code)) client.close(code, reason.toString('utf8'));
          else client.close(CLOSE.lostRunner, `lost the connection to runner ${this.runner.name}; reconnect`);
        });
      },
    });
    opened = true;
    this.heartbeat.watch(ws);
    const send = (data: Buffer | string, binary: boolean) => {
      if (!left && ws.readyState === ws.OPEN) ws.send(data, { binary });
    };
    return {
      input: (data) => send(typeof data === 'string' ? Buffer.from(data) : data, true),
      resize: (cols, rows) => send(JSON.stringify({ type: 'resize', cols, rows }), false),
      // One acknowledgement per turn of the event loop at most, of what the client handed on since.
      written: () => {
        if (ackScheduled || left) return;
        ackScheduled = true;
        setImmediate(() => {
          ackScheduled = false;
          const delivered = received - client.bufferedBytes;
          if (delivered <= acked) return;
          send(JSON.stringify({ type: 'ack', bytes: delivered - acked }), false);
          acked = delivered;
        });
      },
      detach: () => {
        if (left) return;
        left = true;
        ws.close(CLOSE.normal);
      },
    };
  }

  /** Stops the heartbeat and cuts every attachment's socket (their clients get 1011). */
  close(): void {
    this.heartbeat.close();
  }
}
