import { Readable } from 'node:stream';
import { type FileEntry, type FileEvent, SandboxdError } from '@sandboxd/protocol';
import type { ProcessExit, SpawnOptions, StreamedProcess } from '../driver.js';
import type {
  DriverFiles,
  FileList,
  FileMetadata,
  FileRead,
  FileUser,
  FileUserInfo,
  FileWatch,
  ParentsAsRoot,
} from '../files.js';
import { AGENT_PATH } from './commands/exec-agent.js';

type Spawn = (id: string, argv: string[], o: SpawnOptions) => Promise<StreamedProcess>;

/** Metadata operations end well within this; a stuck one is killed (exit 124). */
const META_TIMEOUT_MS = 60_000;
/** Most stdout a metadata operation may print (10,000 list entries are ~3 MiB). */
const MAX_META_OUTPUT = 16 << 20;
const MAX_STDERR = 64 << 10;
/** Who makes missing parents for another user (`mkdirs`): the sandbox's root. */
const ROOT: FileUser = { user: 'root' };
/** Longest header line of a read. */
const MAX_HEADER = 4096;

/** What the file tool prints on stderr when an operation fails (packages/server/native/agent-files.h). */
interface ToolError {
  errno?: number;
  code?: string;
  op?: string;
  path?: string;
  message?: string;
}

/** The SandboxdError of a failed file operation on `path`. */
export function fileError(err: ToolError, path: string): SandboxdError {
  const p = err.path || path;
  const what = err.message || err.code || 'failed';
  const details = { path: p, code: err.code, op: err.op };
  switch (err.code) {
    case 'ENOENT':
      return new SandboxdError('not_found', `No such file or directory: ${p}`, details);
    case 'ENOTDIR':
      return new SandboxdError('validation', `Not a directory: ${p}`, details);
    case 'EISDIR':
      return new SandboxdError('validation', `Is a directory: ${p}`, details);
    case 'EEXIST':
    case 'ENOTEMPTY':
      return new SandboxdError('conflict', `Already exists: ${p}`, details);
    case 'ENOSPC':
    case 'EDQUOT':
      return new SandboxdError('no_space', `No space left on the sandbox's disk or volume for ${p}`, details);
    case 'EACCES':
    case 'EPERM':
    case 'EROFS':
      return new SandboxdError('permission', `Permission denied: ${p} (${what})`, details);
    case 'EPIPE':
      return new SandboxdError('validation', `The upload of ${p} ended before its Content-Length`, details);
    case 'EFBIG':
      return new SandboxdError('validation', `The upload of ${p} is longer than its Content-Length`, details);
    case 'ENAMETOOLONG':
    case 'ELOOP':
    case 'EINVAL':
    case 'EXDEV':
    case 'EBUSY':
      return new SandboxdError('validation', `${err.op ?? 'file'} ${p}: ${what}`, details);
    default:
      return new SandboxdError('internal', `${err.op ?? 'file'} ${p} failed in the sandbox: ${what}`, details);
  }
}

/**
 * The SandboxdError of a failed `unpack` or `pack` (copy streams): the tool's own words where
 * it has some (a bad entry, a type clash), else as {@link fileError}.
 */
export function copyError(err: ToolError, path: string): SandboxdError {
  if (err.op !== 'unpack' && err.op !== 'pack') return fileError(err, path);
  const p = err.path || path;
  const details = { path: p, code: err.code, op: err.op };
  const said = err.message ?? err.code ?? 'failed';
  switch (err.code) {
    case 'EINVAL':
      return new SandboxdError(
        'validation',
        said.startsWith('bad copy stream') ? capital(said) : `${capital(said)}: ${p}`,
        details,
      );
    case 'EPIPE':
      return new SandboxdError('validation', `The copy stream ends inside ${p}`, details);
    case 'EILSEQ':
      return new SandboxdError('validation', `${capital(said)}: ${p}`, details);
    case 'EISDIR':
    case 'ENOTDIR':
      return new SandboxdError('conflict', `${capital(said)}: ${p}`, details);
    default:
      return new SandboxdError('internal', `${err.op} ${p} failed in the sandbox: ${said}`, details);
  }
}

function capital(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

function parseToolError(stderr: string, exit: ProcessExit, path: string): SandboxdError {
  const line = stderr.split('\n').find((l) => l.startsWith('{'));
  if (line) {
    try {
      const err = JSON.parse(line) as ToolError;
      return err.op === 'unpack' || err.op === 'pack' ? copyError(err, path) : fileError(err, path);
    } catch {
      /* not the tool's JSON: below */
    }
  }
  if (exit.timedOut) return new SandboxdError('internal', `The file operation on ${path} timed out in the sandbox`);
  return new SandboxdError(
    'internal',
    `The file operation on ${path} failed in the sandbox (exit ${exit.exitCode}${exit.signal ? `, ${exit.signal}` : ''})`,
  );
}

/**
 * JSON printed by the file tool. It runs as the sandbox's user, whom the sandbox may
 * trace, so its output is untrusted: garbage is an internal error, never a crash.
 */
function parseJson<T>(text: string): T {
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new SandboxdError('internal', "The sandbox's file tool gave an answer that is not JSON");
  }
}

/** Collects a process's output (bounded) and its exit. */
function collect(p: StreamedProcess, maxOut: number): Promise<{ out: Buffer; err: string; exit: ProcessExit }> {
  return new Promise((resolve) => {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let outLen = 0;
    let errLen = 0;
    p.onData((stream, chunk) => {
      if (stream === 'stdout') {
        if (outLen + chunk.length > maxOut) {
          p.kill();
          return;
        }
        out.push(chunk);
        outLen += chunk.length;
      } else if (errLen < MAX_STDERR) {
        err.push(chunk);
        errLen += chunk.length;
      }
    });
    p.onExit((exit) => resolve({ out: Buffer.concat(out), err: Buffer.concat(err).toString('utf8'), exit }));
  });
}

/**
 * {@link DriverFiles} done by the file tool of the sandbox's agent (`/dev/sandboxd-agent
 * file <op> ...`, a static binary bind-mounted into every sandbox), started through the
 * driver's streamed processes: every path is opened inside the sandbox, as its user.
 */
export class AgentFiles implements DriverFiles {
  constructor(private readonly spawn: Spawn) {}

  private start(id: string, args: string[], o: FileUser & { stdin?: boolean; timeoutMs?: number }) {
    return this.spawn(id, [AGENT_PATH, 'file', ...args], {
      user: o.user,
      cwd: '/',
      stdin: o.stdin,
      timeoutMs: o.timeoutMs ?? 0,
    });
  }

  /** Runs a metadata operation; its stdout (JSON lines) on success. */
  private async meta(id: string, args: string[], path: string, o: FileUser = {}): Promise<string> {
    const p = await this.start(id, args, { ...o, timeoutMs: META_TIMEOUT_MS });
    const r = await collect(p, MAX_META_OUTPUT);
    if (r.exit.exitCode !== 0) throw parseToolError(r.err, r.exit, path);
    return r.out.toString('utf8');
  }

  async stat(id: string, path: string, o?: FileUser): Promise<FileEntry> {
    return parseJson<FileEntry>(await this.meta(id, ['stat', path], path, o));
  }

  async list(id: string, path: string, o: FileUser & { depth: number; max?: number }): Promise<FileList> {
    const out = await this.meta(id, ['list', path, String(o.depth), String(o.max ?? 10_000)], path, o);
    const entries: FileEntry[] = [];
    let truncated = false;
    for (const line of out.split('\n')) {
      if (!line) continue;
      const v = parseJson<FileEntry | { truncated: true }>(line);
      if ('truncated' in v) truncated = true;
      else entries.push(v);
    }
    return { entries, truncated };
  }

  async mkdir(id: string, path: string, o: FileUser & ParentsAsRoot = {}): Promise<FileEntry> {
    const owner = o.parentsAsRoot ? await this.ownerOfParents(id, o) : null;
    if (owner) return parseJson<FileEntry>(await this.meta(id, ['mkdirs', path, ...owner, '1'], path, ROOT));
    return parseJson<FileEntry>(await this.meta(id, ['mkdir', path], path, o));
  }

  /**
   * The uid and gid that directories made by root for `o.user` are handed to, or null when
   * that user is root (its own mkdir makes them). `validation` for an unknown user.
   */
  private async ownerOfParents(id: string, o: FileUser): Promise<[string, string] | null> {
    const who = await this.whoami(id, o);
    return who.uid === 0 ? null : [String(who.uid), String(who.gid)];
  }

  async move(id: string, from: string, to: string, o?: FileUser): Promise<FileEntry> {
    return parseJson<FileEntry>(await this.meta(id, ['move', from, to], from, o));
  }

  async whoami(id: string, o?: FileUser): Promise<FileUserInfo> {
    return parseJson<FileUserInfo>(await this.meta(id, ['whoami'], '', o));
  }

  async remove(id: string, path: string, o?: FileUser): Promise<void> {
    await this.meta(id, ['remove', path], path, o);
  }

  async read(id: string, path: string, o: FileUser & { range?: string } = {}): Promise<FileRead> {
    const p = await this.start(id, ['read', path, o.range ?? ''], o);
    return new Promise<FileRead>((resolve, reject) => {
      let header: Buffer | null = Buffer.alloc(0);
      let body: Readable | null = null;
      const err: Buffer[] = [];
      p.onData((stream, chunk) => {
        if (stream === 'stderr') {
          if (err.length < 16) err.push(chunk);
          return;
        }
        if (body) {
          if (!body.push(chunk)) p.pause();
          return;
        }
        header = Buffer.concat([header as Buffer, chunk]);
        const nl = header.indexOf(10);
        if (nl < 0) {
          if (header.length > MAX_HEADER) p.kill();
          return;
        }
        let h: { size: number; start?: number; end?: number; unsatisfiable?: boolean };
        try {
          h = parseJson(header.subarray(0, nl).toString('utf8'));
        } catch (e) {
          header = null;
          p.kill();
          reject(e);
          return;
        }
        const rest = header.subarray(nl + 1);
        header = null;
        if (h.unsatisfiable) {
          resolve({ unsatisfiable: true, size: h.size });
          return;
        }
        body = new Readable({
          read: () => p.resume(),
          destroy: (e, cb) => {
            p.kill(); // the reader went away: the tool stops
            cb(e);
          },
        });
        if (rest.length > 0) body.push(rest);
        resolve({ unsatisfiable: false, size: h.size, start: h.start ?? 0, end: h.end ?? -1, body });
      });
      p.onExit((exit) => {
        if (body) {
          if (exit.exitCode === 0) body.push(null);
          else body.destroy(parseToolError(Buffer.concat(err).toString('utf8'), exit, path));
        } else if (header !== null) reject(parseToolError(Buffer.concat(err).toString('utf8'), exit, path));
      });
    });
  }

  async write(
    id: string,
    path: string,
    body: AsyncIterable<Uint8Array>,
    o: FileUser &
      ParentsAsRoot & { mode?: string; length?: number; signal?: AbortSignal; metadata?: FileMetadata } = {},
  ): Promise<FileEntry> {
    const owner = o.parentsAsRoot ? await this.ownerOfParents(id, o) : null;
    if (owner) await this.meta(id, ['mkdirs', path, ...owner, '0'], path, ROOT);
    const meta = Object.entries(o.metadata ?? {}).map(([k, v]) => {
      if (!k || k.includes('=') || k.includes('\0') || v.includes('\0'))
        throw new SandboxdError('validation', `Bad metadata key ${JSON.stringify(k)}`, { path });
      return `${k}=${v}`;
    });
    const args = ['write', path, o.mode ?? '-', o.length === undefined ? '-' : String(o.length), ...meta];
    const p = await this.start(id, args, { ...o, stdin: true });
    const done = collect(p, 64 << 10);
    const abort = () => p.kill('SIGTERM'); // the tool removes its temporary file
    o.signal?.addEventListener('abort', abort, { once: true });
    try {
      // Not `for await`: leaving it early would destroy the body (the client's request), and
      // the client then gets a reset instead of the tool's answer (507, say).
      const it = body[Symbol.asyncIterator]();
      for (;;) {
        const next = await it.next();
        if (next.done) break;
        if (!p.stdinOpen) break; // the tool stopped (an error it reports below)
        if (!p.write(next.value)) await new Promise<void>((r) => p.onDrain(r));
      }
      p.closeStdin();
    } catch (e) {
      abort();
      await done;
      throw e;
    } finally {
      o.signal?.removeEventListener('abort', abort);
    }
    const r = await done;
    const aborted = () => new SandboxdError('validation', `The upload of ${path} was aborted`, { path });
    if (r.exit.exitCode !== 0) {
      // What the tool says (no space, permission, ...) comes first; its SIGTERM is our abort.
      const err = parseToolError(r.err, r.exit, path);
      throw o.signal?.aborted && err.kind === 'internal' ? aborted() : err;
    }
    if (o.signal?.aborted && o.length === undefined) throw aborted();
    return parseJson<FileEntry>(r.out.toString('utf8'));
  }

  /** `file unpack <dest>` as the sandbox's root, the body on its stdin (see DriverFiles.unpack). */
  async unpack(id: string, dest: string, body: AsyncIterable<Uint8Array>): Promise<{ entries: number; bytes: number }> {
    const p = await this.start(id, ['unpack', dest], { ...ROOT, stdin: true });
    const done = collect(p, 64 << 10);
    try {
      // Not `for await`, as in write: the body is left as it is when the tool stops first.
      const it = body[Symbol.asyncIterator]();
      for (;;) {
        const next = await it.next();
        if (next.done) break;
        if (!p.stdinOpen) break; // the tool stopped (an error it reports below)
        if (!p.write(next.value)) await new Promise<void>((r) => p.onDrain(r));
      }
      p.closeStdin();
    } catch (e) {
      p.kill('SIGTERM'); // the tool removes its temporary file
      await done;
      throw e;
    }
    const r = await done;
    if (r.exit.exitCode !== 0) throw parseToolError(r.err, r.exit, dest);
    const out = parseJson<{ entries?: unknown; bytes?: unknown }>(r.out.toString('utf8'));
    if (!Number.isSafeInteger(out.entries) || !Number.isSafeInteger(out.bytes))
      throw new SandboxdError('internal', "The sandbox's file tool gave an answer that is not its count");
    return { entries: out.entries as number, bytes: out.bytes as number };
  }

  /** `file pack <path> <follow>` as the sandbox's root, its stdout as the stream (see DriverFiles.pack). */
  async pack(id: string, path: string, o: { follow?: boolean } = {}): Promise<Readable> {
    const p = await this.start(id, ['pack', path, o.follow ? '1' : '0'], ROOT);
    return new Promise<Readable>((resolve, reject) => {
      let body: Readable | null = null;
      const err: Buffer[] = [];
      const open = () => {
        body = new Readable({
          read: () => p.resume(),
          destroy: (e, cb) => {
            p.kill(); // the reader went away: the tool stops
            cb(e);
          },
        });
        resolve(body);
        return body;
      };
      p.onData((stream, chunk) => {
        if (stream === 'stderr') {
          if (err.length < 16) err.push(chunk);
          return;
        }
        if (!(body ?? open()).push(chunk)) p.pause();
      });
      p.onExit((exit) => {
        if (exit.exitCode === 0) (body ?? open()).push(null);
        else if (body) body.destroy(parseToolError(Buffer.concat(err).toString('utf8'), exit, path));
        else reject(parseToolError(Buffer.concat(err).toString('utf8'), exit, path));
      });
    });
  }

  async watch(id: string, path: string, o: FileUser & { recursive: boolean }): Promise<FileWatch> {
    const p = await this.start(id, ['watch', path, o.recursive ? '1' : '0'], o);
    return new Promise<FileWatch>((resolve, reject) => {
      let ready = false;
      let partial = '';
      let listener: ((e: FileEvent | { type: 'overflow' }) => void) | null = null;
      const early: (FileEvent | { type: 'overflow' })[] = [];
      const endListeners: (() => void)[] = [];
      let ended = false;
      const err: Buffer[] = [];
      const watch: FileWatch = {
        onEvent: (l) => {
          listener = l;
          for (const e of early.splice(0)) l(e);
        },
        onEnd: (l) => {
          if (ended) l();
          else endListeners.push(l);
        },
        close: () => p.kill('SIGTERM'),
      };
      p.onData((stream, chunk) => {
        if (stream === 'stderr') {
          if (err.length < 16) err.push(chunk);
          return;
        }
        partial += chunk.toString('utf8');
        if (partial.length > 1 << 20) {
          p.kill(); // no event line is that long
          return;
        }
        let nl = partial.indexOf('\n');
        while (nl >= 0) {
          const line = partial.slice(0, nl);
          partial = partial.slice(nl + 1);
          nl = partial.indexOf('\n');
          if (!line) continue;
          let ev: FileEvent | { type: 'ready' } | { type: 'overflow' };
          try {
            ev = parseJson(line);
          } catch {
            p.kill();
            return;
          }
          if (ev.type === 'ready') {
            ready = true;
            resolve(watch);
          } else if (listener) listener(ev);
          else if (early.length < 1000) early.push(ev);
        }
      });
      p.onExit((exit) => {
        ended = true;
        if (!ready) reject(parseToolError(Buffer.concat(err).toString('utf8'), exit, path));
        for (const l of endListeners.splice(0)) l();
      });
    });
  }
}
