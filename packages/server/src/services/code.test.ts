/**
 * CodeService over a scripted in-sandbox server on loopback that speaks E2B's
 * code-interpreter protocol: the translation to sandboxd's events, the mapping of its
 * refusals, timeouts and a client that goes (the connection to the sandbox is closed).
 */
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import type { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { type CodeEvent, SandboxdError } from '@sandboxd/protocol';
import { CodeService } from './code.js';

type Handler = (req: IncomingMessage, body: string, res: ServerResponse) => void;

let server: Server;
let port: number;
let handler: Handler = (_q, _b, res) => res.end();
/** Requests the fake server saw: method, path, parsed body; and when each one's connection closed. */
const seen: Array<{ method: string; path: string; body: unknown; closed: Promise<void> }> = [];

before(async () => {
  server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c) => {
      body += c;
    });
    req.on('end', () => {
      const closed = new Promise<void>((r) => res.once('close', () => r()));
      seen.push({ method: req.method ?? '', path: req.url ?? '', body: body ? JSON.parse(body) : undefined, closed });
      handler(req, body, res);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
});
after(() => {
  server.closeAllConnections();
  server.close();
});

function service(o: { state?: string; refuse?: boolean } = {}) {
  return new CodeService(
    {
      clock: { now: () => 0 } as never,
      sandboxes: {
        get: async (accountId: string, id: string) => {
          if (accountId !== 'acc') throw new SandboxdError('not_found', 'Sandbox not found');
          return { id, state: o.state ?? 'started', stopAt: Number.MAX_SAFE_INTEGER, image: 'local/debian' } as never;
        },
      },
    },
    {
      dial: (_id, p) =>
        new Promise((resolve, reject) => {
          assert.equal(p, 49999);
          const s = connect({ host: '127.0.0.1', port: o.refuse ? 1 : port });
          s.once('connect', () => resolve(s));
          s.once('error', () => reject(new SandboxdError('upstream', 'refused')));
        }),
    },
  );
}

async function events(body: Readable): Promise<CodeEvent[]> {
  let text = '';
  for await (const c of body) text += c;
  return text
    .split('\n')
    .filter((l) => l)
    .map((l) => JSON.parse(l));
}

const ndjson = (res: ServerResponse, lines: unknown[]) => {
  res.writeHead(200, { 'content-type': 'application/x-ndjson' });
  for (const l of lines) res.write(`${JSON.stringify(l)}\n`);
  res.end();
};

describe('CodeService', () => {
  it('execute: sends E2B’s request and answers its events in sandboxd’s shapes', async () => {
    handler = (_q, _b, res) =>
      ndjson(res, [
        { type: 'stdout', text: 'hi\n', timestamp: '2026-01-02T03:04:05.123456Z' },
        { type: 'stderr', text: 'warn\n', timestamp: null },
        {
          type: 'result',
          text: '2',
          html: null,
          png: 'iVBOR',
          json: { a: 1 },
          data: { x: [1] },
          'application/vnd.custom': 'c',
          extra: { 'text/x-other': 'o' },
          is_main_result: true,
        },
        { type: 'error', name: 'ValueError', value: 'bad', traceback: 'Traceback...\nValueError: bad' },
        { type: 'number_of_executions', execution_count: 3 },
        { type: 'some_new_type', x: 1 },
        { type: 'end_of_execution' },
        { type: 'stdout', text: 'after the end is dropped' },
      ]);
    const body = await service().execute('acc', 'sbx_1', {
      code: 'print("hi")',
      language: 'python',
      envs: { A: 'b' },
    });
    const ev = await events(body);
    assert.deepEqual(seen.at(-1)?.body, { code: 'print("hi")', language: 'python', env_vars: { A: 'b' } });
    assert.equal(seen.at(-1)?.path, '/execute');
    assert.deepEqual(ev[0], { type: 'stdout', text: 'hi\n', timestamp: '2026-01-02T03:04:05.123Z' });
    assert.equal(ev[1].type, 'stderr');
    assert.ok(!Number.isNaN(Date.parse((ev[1] as { timestamp: string }).timestamp)));
    assert.deepEqual(ev[2], {
      type: 'result',
      result: {
        isMainResult: true,
        text: '2',
        png: 'iVBOR',
        json: { a: 1 },
        data: { x: [1] },
        extra: { 'application/vnd.custom': 'c', 'text/x-other': 'o' },
      },
    });
    assert.deepEqual(ev[3], {
      type: 'error',
      name: 'ValueError',
      value: 'bad',
      traceback: 'Traceback...\nValueError: bad',
    });
    assert.deepEqual(ev.slice(4), [{ type: 'executionCount', count: 3 }, { type: 'end' }]);
  });

  it('execute: contextId goes as context_id; a contextId with a language is refused before the sandbox is asked', async () => {
    handler = (_q, _b, res) => ndjson(res, [{ type: 'end_of_execution' }]);
    await events(await service().execute('acc', 'sbx_1', { code: '1', contextId: 'ctx-1' }));
    assert.deepEqual(seen.at(-1)?.body, { code: '1', context_id: 'ctx-1' });
    const before = seen.length;
    await assert.rejects(
      service().execute('acc', 'sbx_1', { code: '1', contextId: 'ctx-1', language: 'python' }),
      (e: SandboxdError) => e.kind === 'validation' && /Only one of contextId or language/.test(e.message),
    );
    assert.equal(seen.length, before);
  });

  it("the server's refusals keep its message: 400 validation, 404 not_found, 500 upstream", async () => {
    for (const [status, kind, text] of [
      [400, 'validation', 'Unsupported language: cobol'],
      [404, 'not_found', 'Context nope not found'],
      [500, 'validation', 'Failed to create context: no kernel for language cobol'],
      [500, 'upstream', 'kernel failed'],
    ] as const) {
      handler = (_q, _b, res) => {
        res.writeHead(status, { 'content-type': 'text/plain' });
        res.end(text);
      };
      await assert.rejects(service().execute('acc', 'sbx_1', { code: '1', language: 'cobol' }), (e: SandboxdError) => {
        assert.equal(e.kind, kind);
        assert.match(e.message, new RegExp(text));
        return true;
      });
    }
  });

  it('nothing listening: no_code_interpreter naming the image; not the caller’s: not_found; stopped: conflict', async () => {
    await assert.rejects(service({ refuse: true }).listContexts('acc', 'sbx_1'), (e: SandboxdError) => {
      assert.equal(e.kind, 'no_code_interpreter');
      assert.equal(e.status, 409);
      assert.deepEqual((e.details as { image: string }).image, 'local/code-interpreter');
      assert.match(e.message, /local\/code-interpreter/);
      return true;
    });
    await assert.rejects(service().listContexts('other', 'sbx_1'), (e: SandboxdError) => e.kind === 'not_found');
    await assert.rejects(
      service({ state: 'paused' }).listContexts('acc', 'sbx_1'),
      (e: SandboxdError) => e.kind === 'conflict' && /paused/.test(e.message),
    );
  });

  it('contexts: list, create, remove, restart map to E2B’s calls', async () => {
    handler = (req, _b, res) => {
      if (req.method === 'GET') return ndjsonJson(res, [{ id: 'a', language: 'python', cwd: '/home/user' }]);
      if (req.method === 'POST' && req.url === '/contexts')
        return ndjsonJson(res, { id: 'b', language: 'r', cwd: '/tmp' });
      res.writeHead(200);
      res.end('null');
    };
    const s = service();
    assert.deepEqual(await s.listContexts('acc', 'x'), [{ id: 'a', language: 'python', cwd: '/home/user' }]);
    assert.deepEqual(await s.createContext('acc', 'x', { language: 'r', cwd: '/tmp' }), {
      id: 'b',
      language: 'r',
      cwd: '/tmp',
    });
    assert.deepEqual(seen.at(-1)?.body, { language: 'r', cwd: '/tmp' });
    await s.removeContext('acc', 'x', 'b');
    assert.deepEqual([seen.at(-1)?.method, seen.at(-1)?.path], ['DELETE', '/contexts/b']);
    await s.restartContext('acc', 'x', 'a');
    assert.deepEqual([seen.at(-1)?.method, seen.at(-1)?.path], ['POST', '/contexts/a/restart']);
  });

  it('timeoutMs: the connection to the sandbox is closed and the stream ends with a TimeoutError event', async () => {
    handler = (_q, _b, res) => {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.write(`${JSON.stringify({ type: 'stdout', text: 'started\n' })}\n`);
      // never ends by itself
    };
    const ev = await events(await service().execute('acc', 'x', { code: 'sleep', timeoutMs: 300 }));
    assert.equal(ev[0].type, 'stdout');
    assert.equal(ev.at(-1)?.type, 'error');
    assert.equal((ev.at(-1) as { name: string }).name, 'TimeoutError');
    await seen.at(-1)?.closed; // the run's connection was closed (the server interrupts it)
  });

  it('a client that goes closes the connection to the sandbox; a cut answer ends with UnexpectedEndOfExecution', async () => {
    handler = (_q, _b, res) => {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.write(`${JSON.stringify({ type: 'stdout', text: 'x\n' })}\n`);
    };
    const gone = new AbortController();
    const body = await service().execute('acc', 'x', { code: 'loop' }, gone.signal);
    const first = await new Promise<string>((r) => body.once('data', (c) => r(String(c))));
    assert.match(first, /"stdout"/);
    gone.abort();
    await seen.at(-1)?.closed;
    assert.ok(body.destroyed);

    handler = (_q, _b, res) => {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.end(`${JSON.stringify({ type: 'stdout', text: 'x\n' })}\n`);
    };
    const ev = await events(await service().execute('acc', 'x', { code: '1' }));
    assert.deepEqual(
      ev.map((e) => [e.type, (e as { name?: string }).name]),
      [
        ['stdout', undefined],
        ['error', 'UnexpectedEndOfExecution'],
      ],
    );
  });
});

function ndjsonJson(res: ServerResponse, v: unknown) {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify(v));
}

describe('CodeService against a hostile code server (the sandbox is the tenant’s)', () => {
  /** Writes `chunk` every `everyMs` to `res` until its connection closes. */
  const drip = (res: ServerResponse, chunk: string, everyMs: number) => {
    const t = setInterval(() => {
      if (res.destroyed || res.writableEnded) return clearInterval(t);
      res.write(chunk);
    }, everyMs);
    res.once('close', () => clearInterval(t));
  };
  const bounded = <T>(p: Promise<T>, what: string): Promise<T> => {
    let t: NodeJS.Timeout | undefined;
    return Promise.race([
      p.finally(() => clearTimeout(t)),
      new Promise<T>((_r, reject) => {
        t = setTimeout(() => reject(new Error(`stuck: ${what}`)), 20_000);
      }),
    ]);
  };
  const limited = (o: { runsPerSandbox?: number; answerTimeoutMs?: number; maxLineBytes?: number }) =>
    new CodeService(
      {
        clock: { now: () => 0 } as never,
        sandboxes: {
          get: async (_a: string, id: string) =>
            ({ id, state: 'started', stopAt: Number.MAX_SAFE_INTEGER, image: 'local/code-interpreter' }) as never,
        },
      },
      {
        dial: () =>
          new Promise((resolve, reject) => {
            const s = connect({ host: '127.0.0.1', port });
            s.once('connect', () => resolve(s));
            s.once('error', reject);
          }),
        ...o,
      },
    );

  it('runs in flight per sandbox are bounded (rate_limited past the share); an ended run frees its slot; other sandboxes keep theirs', async () => {
    handler = (_q, _b, res) => {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.write(`${JSON.stringify({ type: 'stdout', text: 'x\n' })}\n`);
    };
    const svc = limited({ runsPerSandbox: 2 });
    const a = await svc.execute('acc', 'sbx1', { code: 'loop' });
    const b = await svc.execute('acc', 'sbx1', { code: 'loop' });
    await assert.rejects(
      svc.execute('acc', 'sbx1', { code: 'loop' }),
      (e) => e instanceof SandboxdError && e.kind === 'rate_limited',
    );
    const other = await svc.execute('acc', 'sbx2', { code: 'loop' });
    const closed = seen.at(-3)?.closed;
    a.destroy();
    await closed;
    const c = await svc.execute('acc', 'sbx1', { code: 'loop' });
    for (const s of [b, c, other]) s.destroy();
  });

  it('a client gone before the run started (signal already aborted) holds no run and no slot', async () => {
    handler = (_q, _b, res) => {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.write(`${JSON.stringify({ type: 'stdout', text: 'x\n' })}\n`);
    };
    const svc = limited({ runsPerSandbox: 1 });
    const gone = new AbortController();
    gone.abort();
    const before = seen.length;
    await assert.rejects(
      bounded(svc.execute('acc', 'sbx9', { code: 'loop' }, gone.signal), 'execute'),
      (e) => e instanceof SandboxdError,
    );
    if (seen.length > before) await bounded(seen.at(-1)?.closed as Promise<void>, 'the connection to close');
    const next = await svc.execute('acc', 'sbx9', { code: 'loop' });
    next.destroy();
  });

  it('a line past the bound (no newline, ever) ends the run with UnexpectedEndOfExecution and closes the connection', async () => {
    handler = (_q, _b, res) => {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.write(`${JSON.stringify({ type: 'stdout', text: 'x\n' })}\n{"type":"result","png":"`);
      drip(res, 'A'.repeat(64 * 1024), 1);
    };
    const body = await limited({ maxLineBytes: 1 << 20 }).execute('acc', 'x', { code: 'big' });
    const ev = await bounded(events(body), 'the run to end');
    assert.deepEqual(
      ev.map((e) => [e.type, (e as { name?: string }).name]),
      [
        ['stdout', undefined],
        ['error', 'UnexpectedEndOfExecution'],
      ],
    );
    await bounded(seen.at(-1)?.closed as Promise<void>, 'the connection to close');
  });

  it('lines split across many chunks are put together again', async () => {
    const text = 'y'.repeat(300_000);
    handler = (_q, _b, res) => {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      const all = `${JSON.stringify({ type: 'stdout', text })}\n${JSON.stringify({ type: 'end_of_execution' })}\n`;
      let i = 0;
      const next = () => {
        if (i >= all.length) return res.end();
        res.write(all.slice(i, i + 1000));
        i += 1000;
        setImmediate(next);
      };
      next();
    };
    const ev = await events(await limited({}).execute('acc', 'x', { code: 'p' }));
    assert.deepEqual(
      ev.map((e) => e.type),
      ['stdout', 'end'],
    );
    assert.equal((ev[0] as { text: string }).text, text);
  });

  it('an error answer with an endless body: the call fails (upstream) without reading it all', async () => {
    handler = (_q, _b, res) => {
      res.writeHead(500, { 'content-type': 'text/plain' });
      drip(res, 'E'.repeat(16 * 1024), 1);
    };
    await assert.rejects(
      bounded(limited({ answerTimeoutMs: 2000 }).listContexts('acc', 'x'), 'listContexts'),
      (e) => e instanceof SandboxdError && e.kind === 'upstream' && /answered 500/.test(e.message),
    );
    await bounded(seen.at(-1)?.closed as Promise<void>, 'the connection to close');
  });

  it('a context answer that never ends (endless, or dripped) fails within the answer timeout', async () => {
    handler = (_q, _b, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      drip(res, '['.repeat(64 * 1024), 1);
    };
    await assert.rejects(
      bounded(limited({ answerTimeoutMs: 2000 }).listContexts('acc', 'x'), 'listContexts (endless)'),
      (e) => e instanceof SandboxdError && (e.kind === 'upstream' || e.kind === 'upstream_timeout'),
    );
    handler = (_q, _b, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      drip(res, ' ', 100);
    };
    await assert.rejects(
      bounded(limited({ answerTimeoutMs: 1000 }).createContext('acc', 'x', {}), 'createContext (dripped)'),
      (e) => e instanceof SandboxdError && e.kind === 'upstream_timeout',
    );
  });
});
