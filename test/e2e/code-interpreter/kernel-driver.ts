/**
 * Drives a code-interpreter kernel (images/code-interpreter/kernels/) over its JSON-lines
 * protocol: requests `{id, code, env, cwd}` on stdin, events on stdout, SIGINT to interrupt.
 * The transport is a local child process (host tests) or a streamed exec in a sandbox.
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

export type KernelEvent = {
  id: number;
  type: 'stdout' | 'stderr' | 'result' | 'error' | 'end';
  text?: string;
  data?: Record<string, unknown>;
  main?: boolean;
  name?: string;
  value?: string;
  traceback?: string[];
  execution_count?: number;
};

export interface KernelTransport {
  /** The kernel's pid on this host (local kernels only). */
  readonly pid?: number;
  /** Writes one request line (with its newline). */
  write(line: string): Promise<void>;
  /** Sends a signal to the kernel (SIGINT interrupts the running request). */
  signal(sig: 'SIGINT' | 'SIGTERM' | 'SIGKILL'): Promise<void>;
  /** Closes the kernel's stdin and waits (bounded) for it to end; kills it if it does not. */
  close(): Promise<void>;
  /** Calls `cb` with every line the kernel prints on stdout. */
  onLine(cb: (line: string) => void): void;
}

type Waiter = {
  events: KernelEvent[];
  resolve: (events: KernelEvent[]) => void;
  /** Fails the request (the kernel was closed before its end). */
  abandon: () => void;
  onEvent?: (ev: KernelEvent) => void;
};

export class KernelClient {
  private nextId = 1;
  private readonly waiters = new Map<number, Waiter>();
  /** Stdout lines that are not events of a request we sent: must stay empty. */
  readonly stray: string[] = [];

  constructor(readonly transport: KernelTransport) {
    transport.onLine((line) => this.onLine(line));
  }

  private onLine(line: string): void {
    let ev: KernelEvent;
    try {
      ev = JSON.parse(line);
    } catch {
      this.stray.push(line);
      return;
    }
    const w = this.waiters.get(ev.id);
    if (!w) {
      this.stray.push(line);
      return;
    }
    w.events.push(ev);
    w.onEvent?.(ev);
    if (ev.type === 'end') {
      this.waiters.delete(ev.id);
      w.resolve(w.events);
    }
  }

  /**
   * Runs one cell and resolves to its events, `end` included. `onEvent` sees each event as it
   * arrives (e.g. to interrupt once the cell printed something). Fails after `timeoutMs`.
   */
  run(
    code: string,
    o: {
      env?: Record<string, string>;
      cwd?: string | null;
      onEvent?: (ev: KernelEvent) => void;
      timeoutMs?: number;
    } = {},
  ): Promise<KernelEvent[]> {
    const id = this.nextId++;
    const timeoutMs = o.timeoutMs ?? 60_000;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        const w = this.waiters.get(id);
        this.waiters.delete(id);
        reject(new Error(`no end of request ${id} in ${timeoutMs} ms; events: ${JSON.stringify(w?.events)}`));
      }, timeoutMs);
      this.waiters.set(id, {
        events: [],
        onEvent: o.onEvent,
        resolve: (events) => {
          clearTimeout(timer);
          resolve(events);
        },
        abandon: () => {
          clearTimeout(timer);
          reject(new Error(`the kernel was closed before the end of request ${id}`));
        },
      });
      const req = { id, code, env: o.env ?? {}, cwd: o.cwd ?? null };
      this.transport.write(`${JSON.stringify(req)}\n`).catch((err) => {
        clearTimeout(timer);
        this.waiters.delete(id);
        reject(err);
      });
    });
  }

  interrupt(): Promise<void> {
    return this.transport.signal('SIGINT');
  }

  async close(): Promise<void> {
    await this.transport.close();
    // Requests the kernel never ended fail now instead of holding their timers.
    for (const w of this.waiters.values()) w.abandon();
    this.waiters.clear();
  }
}

/** All text of one stream in a request's events. */
export function streamText(events: KernelEvent[], type: 'stdout' | 'stderr' = 'stdout'): string {
  return events
    .filter((e) => e.type === type)
    .map((e) => e.text)
    .join('');
}

/** The main result's data, or undefined. */
export function mainResult(events: KernelEvent[]): Record<string, unknown> | undefined {
  return events.find((e) => e.type === 'result' && e.main)?.data;
}

/** The request's error event, or undefined. */
export function errorOf(events: KernelEvent[]): KernelEvent | undefined {
  return events.find((e) => e.type === 'error');
}

/** A kernel run as a local child process. */
export function localKernel(argv: string[], env: NodeJS.ProcessEnv = process.env): KernelClient {
  // Its own session, as the code server starts kernels: a kernel's signals to its own process
  // group stay there.
  const child = spawn(argv[0], argv.slice(1), { stdio: ['pipe', 'pipe', 'pipe'], env, detached: true });
  const stderr: string[] = [];
  child.stderr.on('data', (d) => stderr.push(String(d)));
  const rl = createInterface({ input: child.stdout });
  const exited = new Promise<void>((res) => child.once('exit', () => res()));
  return new KernelClient({
    pid: child.pid,
    write: (line) =>
      new Promise((res, rej) => {
        child.stdin.write(line, (err) => (err ? rej(err) : res()));
      }),
    signal: async (sig) => {
      child.kill(sig);
    },
    close: async () => {
      child.stdin.end();
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
      // A process the kernel started may still hold its stdout/stderr (a killed group's
      // last child): the kernel is gone, so its pipes are closed on this side.
      rl.close();
      child.stdout.destroy();
      child.stderr.destroy();
    },
    onLine: (cb) => rl.on('line', cb),
  });
}

/**
 * A kernel run in a sandbox by a streamed exec with stdin (sandboxd's processes API):
 * `api(path, init)` is fetch against `/api/v1/sandboxes/{id}` with the account's key.
 */
export async function sandboxKernel(
  api: (path: string, init: { method: string; body?: string; json?: unknown }) => Promise<Response>,
  command: string,
): Promise<KernelClient> {
  const res = await api('/exec', { method: 'POST', json: { command, options: { stream: true, stdin: true } } });
  if (res.status !== 200) throw new Error(`exec ${command}: ${res.status} ${await res.text()}`);
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const dec = new TextDecoder();
  let buf = '';
  let out = '';
  let pid = 0;
  let onLine: (line: string) => void = () => {};
  let started: () => void = () => {};
  const start = new Promise<void>((res) => {
    started = res;
  });
  const done = (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += dec.decode(value, { stream: true });
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        const ev = JSON.parse(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
        if (ev.type === 'start') {
          pid = ev.pid;
          started();
        } else if (ev.type === 'stdout') {
          out += ev.data ?? Buffer.from(ev.dataBase64 ?? '', 'base64').toString('utf8');
          for (let i = out.indexOf('\n'); i >= 0; i = out.indexOf('\n')) {
            onLine(out.slice(0, i));
            out = out.slice(i + 1);
          }
        } else if (ev.type === 'exit') {
          return;
        }
      }
    }
  })();
  await start;
  const post = async (path: string, body?: string, json?: unknown) => {
    const r = await api(`/processes/${pid}${path}`, { method: 'POST', body, json });
    if (r.status !== 204) throw new Error(`${path}: ${r.status} ${await r.text()}`);
  };
  return new KernelClient({
    write: (line) => post('/stdin', line),
    signal: (sig) => post('/signal', undefined, { signal: sig }),
    close: async () => {
      await post('/stdin/close').catch(() => {});
      const timer = setTimeout(() => void post('/signal', undefined, { signal: 'SIGKILL' }).catch(() => {}), 10_000);
      await done;
      clearTimeout(timer);
    },
    onLine: (cb) => {
      onLine = cb;
    },
  });
}
