import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer, type Server, type Socket } from 'node:net';
import { nativeBin } from '../native.js';
import { cStrings, encodeFrame, type Frame, FrameReader, u32 } from './frames.js';

/** Options of {@link HostSpawner.run}. */
export interface SpawnOptions {
  /** Written to the program's stdin, then EOF (stdin is /dev/null without it). */
  input?: string | Buffer;
  /** SIGKILL after this long; 0 = never. Default 30000. */
  timeoutMs?: number;
  /** Each of stdout and stderr is kept up to this many bytes (at most 4 MiB). Default 1 MiB. */
  maxOutputBytes?: number;
  /** stdout and stderr on /dev/null: for programs that leave something running that would hold the pipes. */
  quiet?: boolean;
  /**
   * The program's stdin and stdout become one socket connected to this process, handed to
   * `channel` before the program starts (stderr on /dev/null): for a runtime that leaves the
   * container's init holding its stdio as a channel to the server.
   */
  channel?: (socket: Socket) => void;
}

/** How a program ended and what it printed. */
export interface SpawnResult {
  /** Exit code, or -1 when a signal killed it. */
  code: number;
  /** The signal that killed it, or 0. */
  signal: number;
  timedOut: boolean;
  /** Some output went past maxOutputBytes and was dropped. */
  truncated: boolean;
  stdout: Buffer;
  stderr: Buffer;
}

/** The program could not be started (not found, not executable, no channel); `errno` is its code. */
export class SpawnError extends Error {
  constructor(
    readonly file: string,
    readonly errno: number,
    message: string,
  ) {
    super(message);
  }
}

const PROTOCOL_VERSION = 2;
const T_SPAWN = 1,
  T_HOSTNAME = 2;
const R_HELLO = 0,
  R_EXIT = 1,
  R_FAILED = 2;
const F_QUIET = 1,
  F_CHANNEL = 2;
const MAX_FRAME = 16 << 20;
/** Largest answer accepted (its length field): an EXIT carries at most 4 MiB of output per stream. */
const ANSWER_MAX = MAX_FRAME + 64;
const TOKEN_LEN = 16;
/** How long a connection on the channel socket may take to say whose it is. */
const TOKEN_WAIT_MS = 5000;

interface Pending {
  file: string;
  resolve: (r: SpawnResult) => void;
  reject: (e: Error) => void;
}

/**
 * Starts host programs through a small native process (packages/server/native/spawner.c)
 * instead of node's `spawn`, which forks the whole server: at ~170 MB of memory a spawn
 * from node blocks the event loop ~5 ms and takes ~10 ms, and that grows with the
 * server's size. One per process ({@link HostSpawner.shared}), started on first use and
 * again after it died (a request in flight then fails).
 */
export class HostSpawner {
  private static instance: HostSpawner | undefined;
  /** The process-wide spawner. */
  static shared(): HostSpawner {
    HostSpawner.instance ??= new HostSpawner();
    return HostSpawner.instance;
  }

  private proc: ChildProcess | null = null;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private frames = new FrameReader(ANSWER_MAX);
  /** Channel connections that are expected, by token. */
  private readonly channels = new Map<string, (s: Socket) => void>();
  private channelServer: Promise<{ server: Server; name: string }> | null = null;

  /** Runs `file` (looked up in PATH) with `args`; rejects with SpawnError when it cannot start. */
  async run(file: string, args: string[], o: SpawnOptions = {}): Promise<SpawnResult> {
    let flags = o.quiet ? F_QUIET : 0;
    let input = o.input === undefined ? Buffer.alloc(0) : Buffer.from(o.input);
    let channelName = Buffer.alloc(0);
    let token: string | undefined;
    let handedOver: Promise<void> | undefined;
    if (o.channel) {
      const { name } = await this.listen();
      const t = randomBytes(TOKEN_LEN);
      const key = t.toString('hex');
      token = key;
      const take = o.channel;
      handedOver = new Promise<void>((resolve) =>
        this.channels.set(key, (s) => {
          take(s);
          resolve();
        }),
      );
      flags = F_CHANNEL;
      input = t;
      channelName = Buffer.from(name);
    }
    const strings = cStrings([file, ...args]);
    const id = this.nextId++;
    const frame = encodeFrame(
      T_SPAWN,
      id,
      [
        flags,
        u32(o.timeoutMs ?? 30_000),
        u32(o.maxOutputBytes ?? 1 << 20),
        input.length,
        1 + args.length,
        channelName.length,
      ],
      input,
      channelName,
      strings,
    );
    if (frame.length - 4 > MAX_FRAME) {
      if (token) this.channels.delete(token);
      throw new SpawnError(file, 7 /* E2BIG */, `${file}: arguments and input too long`);
    }
    const result = this.request(id, frame, file);
    try {
      const r = await result;
      // The connection was made before the program started, but its arrival here races
      // with the answer: a caller learns the program ended only after it has the channel.
      if (handedOver) {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          handedOver,
          new Promise((res) => {
            timer = setTimeout(res, TOKEN_WAIT_MS);
            timer.unref();
          }),
        ]);
        clearTimeout(timer);
      }
      return r;
    } finally {
      if (token) this.channels.delete(token);
      this.holdOpen();
    }
  }

  /**
   * Sets the hostname of the UTS namespace of process `pid` (a sandbox's init): the spawner
   * enters it and comes back, with no program started. Rejects with SpawnError (`errno`)
   * when `pid` is gone or the name is refused.
   */
  async setHostname(pid: number, name: string): Promise<void> {
    const id = this.nextId++;
    try {
      await this.request(id, encodeFrame(T_HOSTNAME, id, [u32(pid)], Buffer.from(name)), 'sethostname');
    } finally {
      this.holdOpen();
    }
  }

  /**
   * Sends request `frame` (numbered `id`) to the spawner, started if none runs, and resolves
   * with its answer; `file` names it in errors. The caller calls holdOpen() once it settled.
   */
  private request(id: number, frame: Buffer, file: string): Promise<SpawnResult> {
    const proc = this.process();
    return new Promise<SpawnResult>((resolve, reject) => {
      this.pending.set(id, { file, resolve, reject });
      this.holdOpen();
      proc.stdin!.write(frame);
    });
  }

  /** Pid of the spawner process, or 0 when none runs. */
  get pid(): number {
    return this.proc?.pid ?? 0;
  }

  /** Stops the spawner (programs it started go on). For tests; `run` starts a new one. */
  close(): void {
    this.proc?.stdin?.destroy();
    this.proc?.stdout?.destroy();
    this.proc = null;
    void this.channelServer?.then(
      ({ server }) => server.close(),
      () => undefined,
    );
    this.channelServer = null;
  }

  private process(): ChildProcess {
    if (this.proc) return this.proc;
    const proc = spawn(nativeBin('spawner'), [], { stdio: ['pipe', 'pipe', 'inherit'] });
    this.proc = proc;
    this.frames = new FrameReader(ANSWER_MAX);
    this.held = true;
    this.holdOpen();
    proc.stdout!.on('data', (d: Buffer) => {
      if (this.proc === proc) this.onData(d);
    });
    proc.stdin!.on('error', () => undefined);
    const gone = () => {
      if (this.proc !== proc) return;
      this.proc = null;
      for (const p of this.pending.values())
        p.reject(new SpawnError(p.file, 5 /* EIO */, `${p.file}: the host spawner went away`));
      this.pending.clear();
    };
    proc.on('exit', gone);
    proc.on('error', gone);
    proc.stdout!.on('close', gone);
    return proc;
  }

  private held = false;
  /** An idle spawner must not keep a server, a test or a CLI alive; one with work must. */
  private holdOpen(): void {
    const proc = this.proc;
    const want = this.pending.size > 0;
    if (!proc || want === this.held) return;
    this.held = want;
    for (const h of [proc, proc.stdout, proc.stdin] as unknown as Array<{ ref(): void; unref(): void }>) {
      if (want) h.ref();
      else h.unref();
    }
  }

  private onData(d: Buffer): void {
    if (!this.frames.read(d, (f) => this.onAnswer(f))) this.close(); // not the spawner's frames
  }

  private onAnswer({ type, id, payload: view }: Frame): void {
    const payload = Buffer.from(view);
    if (type === R_HELLO) {
      if (payload.length < 4 || payload.readUInt32LE(0) !== PROTOCOL_VERSION) this.close();
      return;
    }
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    if (type === R_EXIT && payload.length >= 16) {
      const flags = payload.readUInt32LE(8);
      const outLen = payload.readUInt32LE(12);
      p.resolve({
        code: payload.readInt32LE(0),
        signal: payload.readInt32LE(4),
        timedOut: (flags & 1) !== 0,
        truncated: (flags & 2) !== 0,
        stdout: payload.subarray(16, 16 + outLen),
        stderr: payload.subarray(16 + outLen),
      });
    } else if (type === R_FAILED && payload.length >= 4) {
      p.reject(new SpawnError(p.file, payload.readInt32LE(0), payload.subarray(4).toString('utf8')));
    } else {
      p.reject(new SpawnError(p.file, 5, `${p.file}: malformed answer from the host spawner`));
    }
  }

  /**
   * The abstract unix socket that channel connections arrive on. It has no path on disk;
   * sandboxes, in their own network namespaces, cannot reach it; a connection counts only
   * with a 128-bit token handed out for one spawn.
   */
  private listen(): Promise<{ server: Server; name: string }> {
    this.channelServer ??= new Promise((resolve, reject) => {
      const name = `sandboxd-spawner-${process.pid}-${randomBytes(8).toString('hex')}`;
      const server = createServer({ pauseOnConnect: false }, (s) => this.onChannel(s));
      server.once('error', (e) => {
        this.channelServer = null;
        reject(e);
      });
      server.listen(`\0${name}`, () => {
        server.unref();
        resolve({ server, name });
      });
    });
    return this.channelServer;
  }

  private onChannel(s: Socket): void {
    let got = Buffer.alloc(0);
    const timer = setTimeout(() => s.destroy(), TOKEN_WAIT_MS);
    timer.unref();
    s.on('error', () => undefined);
    const onData = (d: Buffer) => {
      got = Buffer.concat([got, d]);
      if (got.length < TOKEN_LEN) return;
      clearTimeout(timer);
      s.pause();
      s.off('data', onData);
      const token = got.subarray(0, TOKEN_LEN).toString('hex');
      const take = this.channels.get(token);
      if (!take) {
        s.destroy();
        return;
      }
      this.channels.delete(token);
      // Anything after the token is the program's: given back before its reader attaches.
      if (got.length > TOKEN_LEN) s.unshift(got.subarray(TOKEN_LEN));
      take(s);
      s.resume();
    };
    s.on('data', onData);
  }
}
