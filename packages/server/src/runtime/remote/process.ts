import { SandboxdError } from '@sandboxd/protocol';
import type { RawData, WebSocket } from 'ws';
import type { ProcessExit, PtyProcess, StreamedProcess } from '../driver.js';
import type { RunnerClient } from './client.js';
import { FRAME, fromErrorBody, INPUT_WINDOW_BYTES } from './wire.js';

/** What a process whose runner connection was lost is reported as: killed. */
const LOST_EXIT: ProcessExit = { exitCode: 137, signal: 'SIGKILL', timedOut: false };

type Chunk = { tag: number; data: Buffer };

/**
 * The client side of one process socket (see `runner/sockets.ts`): output queued while
 * paused or before a listener, input flow-controlled by the runner's acks (`write` answers
 * false once {@link INPUT_WINDOW_BYTES} are in flight), exit delivered after the output.
 * A socket that closes without an exit (the runner died, the network failed) ends the
 * process as killed (137, SIGKILL): the runner kills what its socket no longer reaches.
 */
class RemoteProc {
  pid = 0;
  private dataListener: ((c: Chunk) => void) | null = null;
  private exitListeners: Array<(e: ProcessExit) => void> = [];
  private drainListeners: Array<() => void> = [];
  private queue: Chunk[] = [];
  private paused = false;
  private exit: ProcessExit | null = null;
  private exitDelivered = false;
  private inFlight = 0;
  private needDrain = false;
  stdinOpen: boolean;

  constructor(
    private readonly ws: WebSocket,
    stdin: boolean,
    private readonly onceDrain: boolean,
  ) {
    this.stdinOpen = stdin;
    ws.on('message', (data: RawData, isBinary: boolean) => this.message(data, isBinary));
    ws.on('close', () => {
      this.stdinOpen = false;
      if (!this.exit) this.exit = LOST_EXIT;
      if (this.onceDrain) this.emitDrain();
      this.flush();
    });
    ws.on('error', () => ws.terminate());
  }

  /** Resolves once the runner started the process; rejects with its error. */
  started(args: unknown[], runner: RunnerClient): Promise<void> {
    return new Promise((resolve, reject) => {
      const onClose = () =>
        reject(new SandboxdError('unavailable', `Runner ${runner.name} closed the socket before the process started`));
      this.ws.once('close', onClose);
      this.onStarted = (pid, err) => {
        this.ws.off('close', onClose);
        if (err) reject(err);
        else {
          this.pid = pid;
          resolve();
        }
      };
      this.ws.send(JSON.stringify({ args }));
    });
  }
  private onStarted: ((pid: number, err?: SandboxdError) => void) | null = null;

  private message(data: RawData, isBinary: boolean): void {
    const buf = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
    if (isBinary) {
      if (buf.length < 1) return;
      this.queue.push({ tag: buf[0], data: buf.subarray(1) });
      this.flush();
      return;
    }
    let msg: { type?: string; pid?: number; error?: unknown; exit?: ProcessExit; bytes?: number; open?: boolean };
    try {
      msg = JSON.parse(buf.toString('utf8'));
    } catch {
      return;
    }
    switch (msg.type) {
      case 'started':
        this.onStarted?.(msg.pid ?? 0);
        this.onStarted = null;
        break;
      case 'error':
        this.onStarted?.(0, fromErrorBody(msg.error, 'The runner could not start the process'));
        this.onStarted = null;
        break;
      case 'ack':
        this.inFlight -= msg.bytes ?? 0;
        if (this.needDrain && this.inFlight < INPUT_WINDOW_BYTES) {
          this.needDrain = false;
          this.emitDrain();
        }
        break;
      case 'stdin':
        if (msg.open === false) {
          this.stdinOpen = false;
          this.emitDrain();
        }
        break;
      case 'exit':
        this.stdinOpen = false;
        this.exit = { timedOut: false, signal: null, ...msg.exit } as ProcessExit;
        if (this.onceDrain) this.emitDrain();
        this.flush();
        break;
    }
  }

  /** A streamed process's drain listeners are called once (as the local driver's); a PTY's stay. */
  private emitDrain(): void {
    for (const l of this.onceDrain ? this.drainListeners.splice(0) : [...this.drainListeners]) l();
  }

  private flush(): void {
    while (!this.paused && this.dataListener && this.queue.length) this.dataListener(this.queue.shift()!);
    const drained = !this.queue.length || !this.dataListener;
    if (this.exit && !this.exitDelivered && !this.paused && drained && this.exitListeners.length) {
      this.exitDelivered = true;
      for (const l of this.exitListeners) l(this.exit);
    }
  }

  setData(l: (c: Chunk) => void): void {
    this.dataListener = l;
    queueMicrotask(() => this.flush());
  }
  addExit(l: (e: ProcessExit) => void): void {
    this.exitListeners.push(l);
    if (this.exitDelivered && this.exit) l(this.exit);
    else this.flush();
  }
  addDrain(l: () => void): void {
    this.drainListeners.push(l);
  }
  control(msg: object): void {
    if (this.ws.readyState === this.ws.OPEN) this.ws.send(JSON.stringify(msg));
  }
  pause(): void {
    this.paused = true;
    this.control({ type: 'pause' });
  }
  resume(): void {
    this.paused = false;
    this.control({ type: 'resume' });
    this.flush();
  }
  write(data: Uint8Array): boolean {
    if (this.ws.readyState !== this.ws.OPEN || this.exit) return false;
    const frame = Buffer.allocUnsafe(data.length + 1);
    frame[0] = FRAME.stdin;
    frame.set(data, 1);
    this.ws.send(frame);
    this.inFlight += data.length;
    if (this.inFlight >= INPUT_WINDOW_BYTES) {
      this.needDrain = true;
      return false;
    }
    return true;
  }
  /** Closes the socket (the runner then kills the process if it still runs). */
  drop(): void {
    this.ws.close(1000);
  }
}

/** `spawn` over the runner: a {@link StreamedProcess}. */
export async function remoteSpawn(runner: RunnerClient, args: unknown[], stdin: boolean): Promise<StreamedProcess> {
  const ws = await runner.socket('spawn');
  const p = new RemoteProc(ws, stdin, true);
  try {
    await p.started(args, runner);
  } catch (e) {
    p.drop();
    throw e;
  }
  return {
    get pid() {
      return p.pid;
    },
    onData: (l) => p.setData((c) => l(c.tag === FRAME.stderr ? 'stderr' : 'stdout', c.data)),
    onExit: (l) => p.addExit(l),
    pause: () => p.pause(),
    resume: () => p.resume(),
    write: (data) => (p.stdinOpen ? p.write(data) : false),
    onDrain: (l) => p.addDrain(l),
    closeStdin: () => {
      if (!p.stdinOpen) return;
      p.stdinOpen = false;
      p.control({ type: 'closeStdin' });
    },
    get stdinOpen() {
      return p.stdinOpen;
    },
    kill: (signal = 'SIGKILL') => p.control({ type: 'kill', signal }),
  };
}

/** `execTty` over the runner: a {@link PtyProcess}. */
export async function remoteTty(runner: RunnerClient, args: unknown[]): Promise<PtyProcess> {
  const ws = await runner.socket('tty');
  const p = new RemoteProc(ws, true, false);
  try {
    await p.started(args, runner);
  } catch (e) {
    p.drop();
    throw e;
  }
  return {
    get pid() {
      return p.pid;
    },
    write: (data) => p.write(typeof data === 'string' ? Buffer.from(data) : data),
    onDrain: (l) => p.addDrain(l),
    resize: (cols, rows) => p.control({ type: 'resize', cols, rows }),
    onData: (l) => p.setData((c) => l(c.data)),
    onExit: (l) => p.addExit((e) => l({ exitCode: e.exitCode, signal: e.signal })),
    pause: () => p.pause(),
    resume: () => p.resume(),
    kill: (signal = 'SIGKILL') => p.control({ type: 'kill', signal }),
  };
}
