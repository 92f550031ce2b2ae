/**
 * A stand-in sandboxd for the CLI's unit tests: one sandbox that is this machine, with
 * sandbox paths equal to host paths (tests keep to temporary folders), speaking the files
 * and processes routes of docs/files-and-processes.md. Commands run with the host's `sh`
 * (and its `tar`). Not a sandbox of any kind: it only lets `sbx` run end to end offline.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { createReadStream, createWriteStream } from 'node:fs';
import { chmod, lstat, mkdir, readdir, readlink, rename, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { basename, dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';

export const SANDBOX_ID = 'sbx_localtestaaaaaaaaaaa';
export const KEY = 'sk_cli_unit_test';

export interface LocalSandboxd {
  url: string;
  /** Headers of each upload, in order. */
  uploads: IncomingMessage['headers'][];
  close(): Promise<void>;
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

function fail(res: ServerResponse, status: number, kind: string, message: string, details?: unknown): void {
  json(res, status, { code: status, kind, message, details });
}

async function entry(path: string) {
  const st = await lstat(path);
  const type = st.isFile() ? 'file' : st.isDirectory() ? 'dir' : st.isSymbolicLink() ? 'symlink' : 'other';
  return {
    name: basename(path) || '/',
    path,
    type,
    size: st.size,
    mode: st.mode & 0o7777,
    owner: String(st.uid),
    modifiedAt: st.mtime.toISOString(),
    ...(type === 'symlink' ? { symlinkTarget: await readlink(path) } : {}),
  };
}

async function walk(dir: string, depth: number): Promise<unknown[]> {
  const out: unknown[] = [];
  for (const name of (await readdir(dir)).sort()) {
    const p = join(dir, name);
    const e = await entry(p);
    out.push(e);
    if (e.type === 'dir' && depth > 1) out.push(...(await walk(p, depth - 1)));
  }
  return out;
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

const utf8 = new TextDecoder('utf-8', { fatal: true });
function chunkLine(type: string, b: Buffer): string {
  try {
    return JSON.stringify({ type, data: utf8.decode(b) });
  } catch {
    return JSON.stringify({ type, dataBase64: b.toString('base64') });
  }
}

export async function localSandboxd(): Promise<LocalSandboxd> {
  const procs = new Map<number, ChildProcess>();
  const uploads: IncomingMessage['headers'][] = [];
  const base = `/api/v1/sandboxes/${SANDBOX_ID}`;

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const path = url.searchParams.get('path') ?? '';
    const route = `${req.method} ${url.pathname.startsWith(base) ? url.pathname.slice(base.length) : url.pathname}`;
    if (req.headers.authorization !== `Bearer ${KEY}`) return fail(res, 401, 'unauthorized', 'Bad key');
    if (!url.pathname.startsWith(base)) return fail(res, 404, 'not_found', 'Sandbox not found');
    const pm = /^POST \/processes\/(\d+)\/(stdin|stdin\/close|signal)$/.exec(route);
    if (pm) {
      const child = procs.get(Number(pm[1]));
      if (!child) return fail(res, 404, 'not_found', 'No such process');
      const data = await readBody(req);
      if (pm[2] === 'signal') process.kill(-child.pid!, JSON.parse(data.toString()).signal);
      else if (child.exitCode !== null || child.signalCode !== null) return fail(res, 409, 'conflict', 'Exited');
      else if (pm[2] === 'stdin') await new Promise((r) => child.stdin!.write(data, r));
      else child.stdin!.end();
      return void res.writeHead(204).end();
    }
    switch (route) {
      case 'GET ': {
        const now = new Date().toISOString();
        return json(res, 200, {
          sandbox: {
            id: SANDBOX_ID,
            name: 'local',
            state: 'started',
            image: 'local/host',
            createdAt: now,
            stopAt: now,
            publicAccessUrlTemplate: '{{PORT}}-x',
          },
        });
      }
      case 'GET /files/stat':
        return json(res, 200, { entry: await entry(path) });
      case 'GET /files': {
        if (!(await lstat(path)).isDirectory()) return fail(res, 400, 'validation', 'Not a directory', { path });
        return json(res, 200, { entries: await walk(path, Number(url.searchParams.get('depth') ?? 1)) });
      }
      case 'GET /files/content': {
        const st = await lstat(path);
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': st.size });
        return pipeline(createReadStream(path), res);
      }
      case 'PUT /files/content': {
        uploads.push(req.headers);
        await mkdir(dirname(path), { recursive: true });
        const tmp = `${path}.upload-${process.pid}`;
        await pipeline(req, createWriteStream(tmp));
        const mode = url.searchParams.get('mode');
        if (mode) await chmod(tmp, Number.parseInt(mode, 8));
        await rename(tmp, path);
        return json(res, 200, { entry: await entry(path) });
      }
      case 'DELETE /files':
        await lstat(path);
        await rm(path, { recursive: true, force: true });
        return void res.writeHead(204).end();
      case 'POST /exec': {
        const { command, options = {} } = JSON.parse((await readBody(req)).toString());
        const env = { ...process.env, ...(options.env ?? {}) };
        if (!options.stream && !options.background) {
          return execFile('sh', ['-c', command], { cwd: options.cwd, env }, (err, stdout, stderr) => {
            const exitCode = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
            json(res, 200, { stdout, stderr, exitCode, success: exitCode === 0 });
          });
        }
        const child = spawn('sh', ['-c', command], {
          cwd: options.cwd,
          env,
          detached: true,
          stdio: [options.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
        });
        procs.set(child.pid!, child);
        if (options.background)
          return json(res, 200, { stdout: '', stderr: '', exitCode: 0, success: true, pid: child.pid });
        res.writeHead(200, { 'content-type': 'application/x-ndjson' });
        res.write(`${JSON.stringify({ type: 'start', pid: child.pid })}\n`);
        child.stdout!.on('data', (b: Buffer) => res.write(`${chunkLine('stdout', b)}\n`));
        child.stderr!.on('data', (b: Buffer) => res.write(`${chunkLine('stderr', b)}\n`));
        child.on('close', (code, signal) => {
          const signals: Record<string, number> = { SIGINT: 2, SIGKILL: 9, SIGTERM: 15 };
          const exitCode = code ?? 128 + (signals[signal ?? ''] ?? 0);
          res.end(`${JSON.stringify({ type: 'exit', exitCode, signal })}\n`);
        });
        return;
      }
      default:
        return fail(res, 404, 'not_found', `No route ${route}`);
    }
  };

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((e: unknown) => {
      if (res.headersSent) return void res.destroy();
      const code = (e as { code?: string }).code;
      if (code === 'ENOENT')
        return fail(res, 404, 'not_found', 'No such file', {
          path: new URL(req.url ?? '/', 'http://x').searchParams.get('path'),
        });
      fail(res, 500, 'internal', String(e));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    uploads,
    close: () =>
      new Promise((r) => {
        for (const c of procs.values())
          if (c.exitCode === null && c.signalCode === null)
            try {
              process.kill(-c.pid!, 'SIGKILL');
            } catch {
              /* gone */
            }
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
