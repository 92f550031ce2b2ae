/**
 * Real PTYs inside crun sandboxes for the local driver.
 *
 * `crun exec --tty` does not forward window resizes, so the process is started through
 * `tty-relay` (packages/server/native/tty-relay.c): it runs `crun exec --tty
 * --console-socket`, receives the PTY master, and relays it over the child's stdio:
 *   fd 0 -> PTY (input)        fd 1 <- PTY (output)        fd 2 <- relay/crun errors
 *   fd 3 -> control lines      `r <cols> <rows>` (TIOCSWINSZ, kernel sends SIGWINCH),
 *                              `k <signo>` (pidfd_send_signal to the process)
 *   fd 4 <- status lines       `pid <in-sandbox pid> <host pid>` once running, then after
 *                              the last output byte `exit <code>` or `signal <signo>`.
 * The process is started by `crun exec`, so it has the sandbox's namespaces, seccomp
 * filter, capabilities and cgroup.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { constants, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { SandboxdError } from '@sandboxd/protocol';
import type { PtyProcess } from '../../driver.js';
import { nativeBin } from '../native.js';

/** How long the relay may take to report a running process before spawnTty gives up. */
const START_TIMEOUT_MS = 10_000;

export interface SpawnTtyOptions {
  /** The crun command before `exec`, e.g. `['crun', '--root', '/run/sandboxd/crun']`. */
  crunArgv: string[];
  containerId: string;
  /** argv of the process; argv[0] is looked up in the sandbox's PATH. */
  argv: string[];
  /**
   * Environment of the process. crun 1.8 uses it INSTEAD of the container's env when
   * given (not merged), so pass the complete env, PATH included.
   */
  env?: Record<string, string>;
  cwd?: string;
  /** `uid[:gid]`, numeric (what `crun exec --user` accepts). */
  user?: string;
  cols: number;
  rows: number;
  /**
   * Pass `--detach` to the runtime (runc accepts a console socket only when detaching); the
   * relay then follows the process itself and reads its exit status from the kernel.
   */
  detach?: boolean;
}

type ExitInfo = { exitCode: number; signal: string | null };

let relayBin: string | undefined;

/** Path of the compiled relay, compiling it on first use; call at driver init to pay that there. */
export function ttyRelayBin(): string {
  relayBin ??= nativeBin('tty-relay');
  return relayBin;
}

/**
 * Starts `opts.argv` on a new PTY inside the running container `opts.containerId`, sized
 * cols x rows (set before any input reaches it and before this resolves). Resolves once the
 * process is running and its pid is known. Rejects with `SandboxdError` `validation` for bad
 * options or when the executable or cwd does not exist in the sandbox, `internal` when crun
 * or the relay fails (the message says why).
 *
 * Output is never dropped: it waits for an `onData` listener (and while `pause()`d), and the
 * process blocks once the buffers are full. `onExit` fires after the last byte was delivered,
 * so attach `onData`. Exit: `{ exitCode, signal: null }`; death by signal:
 * `{ exitCode: 128 + n, signal: 'SIGKILL' }`. `kill()` signals the process through a pidfd
 * held by the relay (no pid-reuse race); it is a no-op after exit.
 */
export async function spawnTty(opts: SpawnTtyOptions): Promise<PtyProcess> {
  validate(opts);
  const relay = ttyRelayBin();
  const dir = mkdtempSync(join(tmpdir(), 'sbx-tty-'));
  const sock = join(dir, 's');
  const pidFile = join(dir, 'p');
  const crun = [
    ...opts.crunArgv,
    'exec',
    // runsc has no --tty: a console socket gives its exec a terminal.
    ...(opts.crunArgv[0] === 'runsc' ? [] : ['--tty']),
    ...(opts.detach ? ['--detach'] : []),
    '--console-socket',
    sock,
    '--pid-file',
    pidFile,
  ];
  if (opts.cwd !== undefined) crun.push('--cwd', opts.cwd);
  for (const [k, v] of Object.entries(opts.env ?? {})) crun.push('--env', `${k}=${v}`);
  if (opts.user !== undefined) crun.push('--user', opts.user);
  crun.push(opts.containerId, ...opts.argv);
  let child: ChildProcess;
  try {
    child = spawn(relay, [sock, pidFile, String(opts.cols), String(opts.rows), '--', ...crun], {
      stdio: ['pipe', 'pipe', 'pipe', 'pipe', 'pipe'],
    });
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  return new Promise((resolve, reject) => {
    new RelayPty(child, dir, opts, resolve, reject);
  });
}

function validate(o: SpawnTtyOptions): void {
  const bad = (msg: string): never => {
    throw new SandboxdError('validation', msg);
  };
  const noNul = (s: string) => !s.includes('\0');
  if (!o.crunArgv.length || !o.crunArgv.every(noNul)) bad('crunArgv must be a non-empty command');
  if (!/^[A-Za-z0-9_.-]+$/.test(o.containerId) || o.containerId.startsWith('-')) bad('invalid container id');
  if (!o.argv.length || !o.argv[0] || !o.argv.every(noNul)) bad('argv must be non-empty, without NUL bytes');
  for (const [k, v] of Object.entries(o.env ?? {})) {
    if (!k || k.includes('=') || !noNul(k) || !noNul(v)) bad(`invalid environment variable name or value: ${k}`);
  }
  if (o.cwd !== undefined && (!o.cwd.startsWith('/') || !noNul(o.cwd))) bad('cwd must be an absolute path');
  if (o.user !== undefined && !/^\d+(:\d+)?$/.test(o.user)) bad('user must be uid[:gid]');
  checkSize(o.cols, o.rows);
}

function checkSize(cols: number, rows: number): void {
  const ok = (n: number) => Number.isInteger(n) && n >= 1 && n <= 0xffff;
  if (!ok(cols) || !ok(rows)) throw new SandboxdError('validation', 'cols and rows must be integers in 1..65535');
}

function signalName(n: number): string {
  return Object.entries(constants.signals).find(([, v]) => v === n)?.[0] ?? `SIG${n}`;
}

/** Text of crun's error as printed on the PTY: colours and timestamp removed. */
function cleanError(raw: string): string {
  return (
    raw
      // biome-ignore lint/suspicious/noControlCharactersInRegex: ESC starts the ANSI sequences this strips
      .replace(/\x1b\[[0-9;]*[A-Za-z]/g, '')
      .replace(/^\d{4}-\d\d-\d\dT[\d:.]+Z: /gm, '')
      .replace(/\r/g, '')
      .trim()
  );
}

class RelayPty implements PtyProcess {
  pid = 0;
  private readonly stdin: Writable;
  private readonly stdout: Readable;
  private readonly control: Writable;
  private readonly dataListeners: Array<(chunk: Buffer) => void> = [];
  private readonly exitListeners: Array<(exit: ExitInfo) => void> = [];
  /** Output not yet delivered: before a listener exists, or while paused. */
  private readonly queue: Buffer[] = [];
  private userPaused = false;
  private started = false;
  private status: ExitInfo | null = null;
  private closed = false;
  private exited: ExitInfo | null = null;
  private stderr = '';

  constructor(
    child: ChildProcess,
    private readonly dir: string,
    private readonly opts: SpawnTtyOptions,
    private readonly resolve: (p: PtyProcess) => void,
    private readonly reject: (e: Error) => void,
  ) {
    const [stdin, stdout, stderr, control, status] = child.stdio as [Writable, Readable, Readable, Writable, Readable];
    this.stdin = stdin;
    this.stdout = stdout;
    this.control = control;
    for (const s of [stdin, stdout, stderr, control, status]) s.on('error', () => {}); // EPIPE after exit
    (control as unknown as Readable).resume(); // never written by the relay; let it end
    stderr.setEncoding('utf8').on('data', (s: string) => {
      if (this.stderr.length < 8192) this.stderr += s;
    });
    stdout.on('data', (chunk: Buffer) => this.onChunk(chunk));
    let buf = '';
    status.setEncoding('utf8').on('data', (s: string) => {
      buf += s;
      for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
        this.onStatus(buf.slice(0, i));
        buf = buf.slice(i + 1);
      }
    });
    const timer = setTimeout(() => {
      if (this.started) return;
      this.stderr += `no process after ${START_TIMEOUT_MS} ms`;
      child.kill('SIGKILL');
    }, START_TIMEOUT_MS);
    child.on('error', (e) => {
      this.stderr += `tty-relay: ${e.message}`;
    });
    child.on('close', () => {
      clearTimeout(timer);
      rmSync(this.dir, { recursive: true, force: true });
      this.closed = true;
      if (this.started) this.maybeFinish();
      else this.reject(this.startError());
    });
  }

  private onStatus(line: string): void {
    const [word, a] = line.split(' '); // `pid` also carries the host pid; unused: kill goes via the relay's pidfd
    const n = Number(a);
    if (word === 'pid' && !this.started) {
      this.pid = n;
      this.started = true;
      // The relay has unlinked the socket and the pid file by now: drop the folder at once,
      // so a server killed while the terminal runs leaves nothing in the temp dir.
      rmSync(this.dir, { recursive: true, force: true });
      if (this.queue.length) this.stdout.pause();
      this.resolve(this);
    } else if (word === 'exit' && this.opts.crunArgv[0] === 'runsc' && n > 128 && n <= 128 + 64) {
      // runsc: the process the relay follows is runsc's own exec, which exits 128 + n for
      // a process killed by signal n (the kernel's status of the process is the Sentry's).
      this.status = { exitCode: n, signal: signalName(n - 128) };
    } else if (word === 'exit') this.status = { exitCode: n, signal: null };
    else if (word === 'signal') this.status = { exitCode: 128 + n, signal: signalName(n) };
  }

  private startError(): SandboxdError {
    const what =
      cleanError(`${Buffer.concat(this.queue).toString('utf8')}\n${this.stderr}`) ||
      `crun exited with ${this.status?.exitCode}`;
    const kind = /not found in \$PATH|open executable|chdir|permission denied/i.test(what) ? 'validation' : 'internal';
    return new SandboxdError(
      kind,
      `cannot start \`${this.opts.argv[0]}\` in sandbox ${this.opts.containerId}: ${what}`,
    );
  }

  private onChunk(chunk: Buffer): void {
    if (!this.started) {
      this.queue.push(chunk); // start-up output: kept for the error message or the first listener
    } else if (this.queue.length || this.userPaused || !this.dataListeners.length) {
      this.queue.push(chunk);
      this.stdout.pause();
    } else {
      for (const l of this.dataListeners) l(chunk);
    }
  }

  /** Delivers queued output while allowed, then lets the stream flow or holds it. */
  private drain(): void {
    while (this.queue.length && !this.userPaused && this.dataListeners.length) {
      const chunk = this.queue.shift()!;
      for (const l of this.dataListeners) l(chunk);
    }
    if (!this.queue.length && !this.userPaused && this.dataListeners.length) this.stdout.resume();
    else this.stdout.pause();
    this.maybeFinish();
  }

  /** Reports the exit once the relay is gone and every queued chunk was delivered. */
  private maybeFinish(): void {
    if (this.exited || !this.closed || this.queue.length) return;
    const exit = this.status ?? { exitCode: 255, signal: null }; // no status: relay died
    this.exited = exit;
    for (const l of this.exitListeners) l(exit);
  }

  write(data: string | Uint8Array): boolean {
    return this.exited ? true : this.stdin.write(data);
  }

  onDrain(listener: () => void): void {
    this.stdin.on('drain', listener);
  }

  resize(cols: number, rows: number): void {
    checkSize(cols, rows);
    if (!this.exited) this.control.write(`r ${cols} ${rows}\n`);
  }

  onData(listener: (chunk: Buffer) => void): void {
    this.dataListeners.push(listener);
    if (this.dataListeners.length === 1) queueMicrotask(() => this.drain());
  }

  onExit(listener: (exit: ExitInfo) => void): void {
    this.exitListeners.push(listener);
    const done = this.exited;
    if (done) queueMicrotask(() => listener(done));
  }

  pause(): void {
    this.userPaused = true;
    this.stdout.pause();
  }

  resume(): void {
    this.userPaused = false;
    this.drain();
  }

  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    const n = constants.signals[signal];
    if (n === undefined) throw new SandboxdError('validation', `unknown signal ${signal}`);
    if (!this.exited) this.control.write(`k ${n}\n`);
  }
}
