import type { ClientRequest } from 'node:http';
import type { RawData, WebSocket } from 'ws';
import type { ProcessExit } from '../spawn.js';
import type {
  DriverProcesses,
  FollowEvent,
  FollowOptions,
  ProcessFollower,
  ProcessFollowing,
  ProcessSpec,
  ProcessState,
} from '../processes/types.js';
import { readJson, type RunnerClient } from './client.js';
import { SocketHeartbeat } from './heartbeat.js';
import { FRAME } from './wire.js';

/** Header of a streamed call's arguments (shared with `runner/files.ts`). */
const ARGS_HEADER = 'x-sandboxd-args';
/** A stdin write may stream for as long as its client sends. */
const STDIN_TIMEOUT_MS = 24 * 3_600_000;

/**
 * The tracked processes of a runner, reached over the runner protocol
 * (`runner/processes.ts`): start, list, get, closeStdin, signal and closeSandbox are unary
 * calls; stdin is one streamed HTTP request per write (TCP carries its backpressure); each
 * reader is one WebSocket to the runner that relays `start`, output and `exit` one way and
 * acknowledgements the other. A reader acknowledges output once its own consumer took it
 * (`send` answered true) or once it says it drained; the runner weighs what is
 * unacknowledged, so a slow client still slows the process across the hop and what is in
 * flight stays bounded. A socket to the runner that breaks ends its reader with `lost`: the
 * process is still tracked there (follow it again through any replica).
 */
export class RemoteProcesses implements DriverProcesses {
  private readonly heartbeat = new SocketHeartbeat();

  constructor(private readonly runner: RunnerClient) {}

  start(sandboxId: string, spec: ProcessSpec): Promise<ProcessState> {
    return this.runner.call('processes.start', [sandboxId, spec]);
  }
  list(sandboxId: string): Promise<ProcessState[]> {
    return this.runner.call('processes.list', [sandboxId]);
  }
  get(sandboxId: string, pid: number): Promise<ProcessState | null> {
    return this.runner.call('processes.get', [sandboxId, pid]);
  }
  async closeStdin(sandboxId: string, pid: number): Promise<void> {
    await this.runner.call('processes.closeStdin', [sandboxId, pid]);
  }
  async signal(sandboxId: string, pid: number, signal: NodeJS.Signals): Promise<void> {
    await this.runner.call('processes.signal', [sandboxId, pid, signal]);
  }
  async closeSandbox(sandboxId: string): Promise<void> {
    await this.runner.call('processes.closeSandbox', [sandboxId]);
  }

  async writeStdin(
    sandboxId: string,
    pid: number,
    body: AsyncIterable<Uint8Array> | Iterable<Uint8Array>,
  ): Promise<void> {
    let answered = false;
    let bodyError: unknown = null;
    try {
      const res = await this.runner.send('processes.stdin', {
        headers: { [ARGS_HEADER]: JSON.stringify([sandboxId, pid]), 'content-type': 'application/octet-stream' },
        timeoutMs: STDIN_TIMEOUT_MS,
        body: (req) => void pump(req),
      });
      await readJson(res, this.runner.name);
    } catch (e) {
      throw bodyError ?? e;
    } finally {
      answered = true;
    }
    // Hands the body on as the runner takes it; stops once the runner answered (an error midway).
    async function pump(req: ClientRequest): Promise<void> {
      try {
        for await (const chunk of body) {
          if (answered || req.destroyed) break;
          if (!req.write(chunk))
            await new Promise<void>((r) => {
              req.once('drain', r);
              req.once('close', r);
            });
        }
        if (!req.destroyed) req.end();
      } catch (e) {
        bodyError = e;
        req.destroy(e as Error);
      }
    }
  }

  async follow(sandboxId: string, pid: number, follower: ProcessFollower, o: FollowOptions): Promise<ProcessFollowing> {
    let opened = false;
    let left = false;
    /** Output taken by the follower and not yet acknowledged; `holding`: the follower is behind (no acks until it drains). */
    let unacked = 0;
    let holding = false;
    let ackScheduled = false;
    let ws: WebSocket | null = null;
    const ack = () => {
      if (ackScheduled || left || holding || !unacked) return;
      ackScheduled = true;
      // One acknowledgement per turn of the event loop at most.
      setImmediate(() => {
        ackScheduled = false;
        if (left || holding || !unacked || ws?.readyState !== ws?.OPEN) return;
        ws!.send(JSON.stringify({ type: 'ack', bytes: unacked }));
        unacked = 0;
      });
    };
    const deliver = (ev: FollowEvent, bytes: number) => {
      const ok = follower.send(ev);
      unacked += bytes;
      if (!ok) holding = true;
      ack();
    };
    const message = (data: RawData, isBinary: boolean) => {
      if (left) return;
      const buf = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
      if (isBinary) {
        if (buf.length < 1) return;
        const chunk = buf.subarray(1);
        deliver({ type: 'output', stream: buf[0] === FRAME.stderr ? 'stderr' : 'stdout', chunk }, chunk.length);
        return;
      }
      let msg: { type?: string; pid?: number; replayFrom?: { stdout: number; stderr: number }; exit?: ProcessExit };
      try {
        msg = JSON.parse(buf.toString('utf8'));
      } catch {
        return;
      }
      if (msg.type === 'start') {
        const start: FollowEvent = { type: 'start', pid: msg.pid ?? pid };
        if (msg.replayFrom) start.replayFrom = msg.replayFrom;
        deliver(start, 0);
      } else if (msg.type === 'exit' && msg.exit) deliver({ type: 'exit', exit: msg.exit }, 0);
    };
    ws = await this.runner.socket('process', {
      query: {
        sandbox: sandboxId,
        pid: String(pid),
        reconnect: o.reconnect ? '1' : '0',
        follow: o.follow ? '1' : '0',
        replay: o.replay === false ? '0' : '1',
      },
      setup: (s) => {
        s.on('message', message);
        s.on('error', () => s.terminate());
        s.on('pong', () => this.heartbeat.pong(s));
        s.on('close', (code: number) => {
          if (!opened || left) return;
          left = true;
          if (code === 1000) follower.end();
          else follower.lost(`lost the connection to runner ${this.runner.name}; follow the process again`);
        });
      },
    });
    opened = true;
    this.heartbeat.watch(ws);
    return {
      drained: () => {
        if (!holding) return;
        holding = false;
        ack();
      },
      detach: () => {
        if (left) return;
        left = true;
        ws!.close(1000);
      },
    };
  }

  /** Stops the heartbeat and cuts every reader's socket (their readers are `lost`). */
  close(): void {
    this.heartbeat.close();
  }
}
