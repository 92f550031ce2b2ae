/**
 * The code server (images/code-interpreter/server/main.py) on this host's python3, without
 * Jupyter, with a fake JSON-lines kernel standing in for bash: the adapter's side of the
 * kernel protocol (events to NDJSON lines, env per request, interrupt, a dying kernel), the
 * HTTP framing and the routes' errors. Fast; the real kernels are covered in sandboxes by
 * server.test.ts (and kernels.test.ts).
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { freePort } from '../harness.js';

const SERVER = resolve(import.meta.dirname, '../../../images/code-interpreter/server/main.py');

function python(): string | null {
  try {
    execFileSync('python3', ['-c', 'import sys; assert sys.version_info >= (3, 9)'], { stdio: 'ignore' });
    return null;
  } catch {
    return 'python3 (3.9 or later) is not installed on this host';
  }
}

/** A kernel of the JSON-lines protocol whose "code" is one command (see the switch). */
const FAKE_KERNEL = String.raw`
import json, os, signal, sys, time
count = 0
interrupted = False
def on_int(*_):
    global interrupted
    interrupted = True
signal.signal(signal.SIGINT, on_int)
def out(ev):
    sys.stdout.write(json.dumps(ev) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    req = json.loads(line)
    rid, code = req["id"], req["code"]
    old = dict(os.environ)
    os.environ.update(req.get("env") or {})
    count += 1
    cmd, _, arg = code.partition(":")
    if cmd == "print": out({"id": rid, "type": "stdout", "text": arg + "\n"})
    elif cmd == "err": out({"id": rid, "type": "stderr", "text": arg + "\n"})
    elif cmd == "result": out({"id": rid, "type": "result", "data": {"text/plain": arg, "text/html": "<i>" + arg + "</i>"}, "main": True})
    elif cmd == "display": out({"id": rid, "type": "result", "data": {"image/png": "iVBOR", "application/x-thing": {"a": 1}}, "main": False})
    elif cmd == "fail": out({"id": rid, "type": "error", "name": "Boom", "value": arg, "traceback": ["line 1", "line 2"]})
    elif cmd == "env": out({"id": rid, "type": "stdout", "text": str(os.environ.get(arg)) + "\n"})
    elif cmd == "pid": out({"id": rid, "type": "stdout", "text": str(os.getpid()) + "\n"})
    elif cmd == "noise": sys.stdout.write("not json\n"); sys.stdout.flush()
    elif cmd == "die": os._exit(3)
    elif cmd == "wait":
        out({"id": rid, "type": "stdout", "text": "waiting\n"})
        interrupted = False
        for _ in range(600):
            if interrupted: break
            time.sleep(0.05)
        if interrupted: out({"id": rid, "type": "error", "name": "Interrupted", "value": "interrupted", "traceback": []})
    os.environ.clear(); os.environ.update(old)
    out({"id": rid, "type": "end", "execution_count": count})
`;

interface Line {
  type: string;
  [k: string]: any;
}

describe('code server adapter on the host (fake JSON-lines kernel)', { skip: python() ?? false }, () => {
  let dir: string;
  let port: number;
  let proc: ChildProcess;

  const call = (
    method: string,
    path: string,
    body?: unknown,
    onLine?: (l: Line, abort: () => void) => void,
  ): Promise<{ status: number; text: string; lines: Line[] }> =>
    new Promise((res, rej) => {
      const data = body === undefined ? undefined : JSON.stringify(body);
      const req = request({ host: '127.0.0.1', port, method, path, agent: false });
      const timer = setTimeout(() => req.destroy(new Error('no answer in 30 s')), 30_000);
      const lines: Line[] = [];
      let text = '';
      req.on('response', (r) => {
        r.setEncoding('utf8');
        let buf = '';
        r.on('data', (d: string) => {
          text += d;
          buf += d;
          for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
            const raw = buf.slice(0, i);
            buf = buf.slice(i + 1);
            if (!(r.headers['content-type'] ?? '').includes('ndjson')) continue;
            const l = JSON.parse(raw) as Line;
            lines.push(l);
            onLine?.(l, () => {
              clearTimeout(timer);
              req.destroy();
              res({ status: r.statusCode ?? 0, text, lines });
            });
          }
        });
        r.on('end', () => {
          clearTimeout(timer);
          res({ status: r.statusCode ?? 0, text, lines });
        });
        r.on('error', () => {});
      });
      req.on('error', (e) => {
        clearTimeout(timer);
        if (!req.destroyed || lines.length === 0) rej(e);
      });
      req.end(data);
    });
  const run = async (code: string, extra: Record<string, unknown> = {}) => {
    const r = await call('POST', '/execute', { code, language: 'bash', ...extra });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.lines.at(-1), { type: 'end_of_execution' });
    return r.lines.filter((l) => l.type !== 'keepalive');
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sbx-ci-adapter-'));
    mkdirSync(join(dir, 'kernels'));
    writeFileSync(join(dir, 'kernels', 'bash-kernel.py'), FAKE_KERNEL);
    writeFileSync(join(dir, 'envs.json'), JSON.stringify({ SANDBOX_VAR: 'sandbox' }));
    port = await freePort();
    proc = spawn('python3', [SERVER], {
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: dir,
        SANDBOXD_CI_PORT: String(port),
        SANDBOXD_CI_HOST: '127.0.0.1',
        SANDBOXD_CI_RUN_DIR: join(dir, 'run'),
        SANDBOXD_CI_LOG: join(dir, 'server.log'),
        SANDBOXD_CI_WARM: '',
        SANDBOXD_CI_KERNELS_DIR: join(dir, 'kernels'),
        SANDBOXD_CI_ENVS_FILE: join(dir, 'envs.json'),
        SANDBOXD_CI_USER: 'no-such-user-sbx',
      },
      stdio: 'ignore',
    });
    for (let i = 0; i < 100; i++) {
      const ok = await call('GET', '/health').then(
        (r) => r.status === 200,
        () => false,
      );
      if (ok) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('the server did not answer /health in 10 s');
  });
  after(async () => {
    if (proc && proc.exitCode === null) {
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
      if (proc.exitCode === null) proc.kill('SIGKILL');
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('maps kernel events to E2B lines: stdout, stderr, results with fields and extra, count', async () => {
    const out = await run('print:hi');
    assert.equal(out[0].type, 'stdout');
    assert.equal(out[0].text, 'hi\n');
    assert.ok(!Number.isNaN(Date.parse(out[0].timestamp)));
    assert.ok(out.some((l) => l.type === 'number_of_executions' && typeof l.execution_count === 'number'));
    assert.equal((await run('err:bad')).find((l) => l.type === 'stderr')?.text, 'bad\n');
    const res = (await run('result:7')).find((l) => l.type === 'result');
    assert.deepEqual(res, { type: 'result', text: '7', html: '<i>7</i>', extra: {}, is_main_result: true });
    const disp = (await run('display')).find((l) => l.type === 'result');
    assert.deepEqual(disp, {
      type: 'result',
      png: 'iVBOR',
      extra: { 'application/x-thing': { a: 1 } },
      is_main_result: false,
    });
  });

  it('an error event becomes {name, value, traceback} with the traceback lines joined', async () => {
    const e = (await run('fail:why')).find((l) => l.type === 'error');
    assert.deepEqual(e, { type: 'error', name: 'Boom', value: 'why', traceback: 'line 1\nline 2' });
  });

  it('sends sandbox envs and per-run env_vars (which win) with the request', async () => {
    const text = (lines: Line[]) => lines.find((l) => l.type === 'stdout')?.text;
    assert.equal(text(await run('env:SANDBOX_VAR')), 'sandbox\n');
    assert.equal(text(await run('env:SANDBOX_VAR', { env_vars: { SANDBOX_VAR: 'mine' } })), 'mine\n');
    assert.equal(text(await run('env:SANDBOX_VAR')), 'sandbox\n');
    writeFileSync(join(dir, 'envs.json'), JSON.stringify({ SANDBOX_VAR: 'changed' }));
    assert.equal(text(await run('env:SANDBOX_VAR')), 'changed\n', 'envs.json is re-read when it changes');
  });

  it('ignores a kernel line that is not an event', async () => {
    const out = await run('noise');
    assert.deepEqual(
      out.map((l) => l.type),
      ['number_of_executions', 'end_of_execution'],
    );
  });

  it('a client that goes away interrupts the run (SIGINT); the next run is served', async () => {
    const r = await call('POST', '/execute', { code: 'wait', language: 'bash' }, (l, abort) => {
      if (l.type === 'stdout') abort();
    });
    assert.equal(r.lines[0]?.text, 'waiting\n');
    const next = await run('print:next');
    assert.equal(next.find((l) => l.type === 'stdout')?.text, 'next\n');
    assert.ok(!next.some((l) => l.type === 'error'), 'the interrupted run ended before this one');
  });

  it('a kernel that dies ends its run with KernelDied and is started again', async () => {
    const pid1 = (await run('pid')).find((l) => l.type === 'stdout')?.text;
    const died = await run('die');
    assert.equal(died.find((l) => l.type === 'error')?.name, 'KernelDied');
    const pid2 = (await run('pid')).find((l) => l.type === 'stdout')?.text;
    assert.ok(pid2 && pid2 !== pid1, 'a new kernel process');
  });

  it('contexts: create with cwd, list, restart, delete; E2B errors for bad input', async () => {
    const c = await call('POST', '/contexts', { language: 'bash', cwd: dir });
    assert.equal(c.status, 200, c.text);
    const ctx = JSON.parse(c.text);
    assert.deepEqual([ctx.language, ctx.cwd], ['bash', dir]);
    assert.ok(JSON.parse((await call('GET', '/contexts')).text).some((x: { id: string }) => x.id === ctx.id));
    assert.equal((await call('POST', `/contexts/${ctx.id}/restart`)).status, 200);
    assert.equal((await call('DELETE', `/contexts/${ctx.id}`)).status, 200);
    assert.equal((await call('DELETE', `/contexts/${ctx.id}`)).status, 404);
    const both = await call('POST', '/execute', { code: 'x', language: 'bash', context_id: 'c' });
    assert.deepEqual([both.status, both.text], [400, 'Only one of context_id or language can be provided']);
    const nf = await call('POST', '/execute', { code: 'x', context_id: 'nope' });
    assert.deepEqual([nf.status, nf.text], [404, 'Context nope not found']);
    assert.equal((await call('POST', '/execute', { code: 'x', language: 'cobol' })).status, 500);
    assert.equal((await call('POST', '/execute', { language: 'bash' })).status, 422);
    assert.equal((await call('POST', '/execute', undefined)).status, 422);
  });
});
