/** HttpClient against real HTTP servers on 127.0.0.1 that misbehave on purpose. */
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { after, describe, it } from 'node:test';
import {
  ConnectionError,
  errorFromResponse,
  RateLimitError,
  RequestTimeoutError,
  ServerError,
  ServiceUnavailableError,
  ValidationError,
} from './errors.js';
import { HttpClient, retryWaitMs } from './http.js';

interface Stub {
  url: string;
  seen: IncomingMessage[];
  bodies: string[];
  close(): Promise<void>;
}

const stubs: Stub[] = [];
after(async () => {
  for (const s of stubs) await s.close();
});

/** A server whose `n`th request (0-based) is answered by `handler`. */
async function stub(handler: (n: number, req: IncomingMessage, res: ServerResponse) => void): Promise<Stub> {
  const seen: IncomingMessage[] = [];
  const bodies: string[] = [];
  const server: Server = createServer((req, res) => {
    const n = seen.length;
    seen.push(req);
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      bodies.push(body);
      handler(n, req, res);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const s: Stub = {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    seen,
    bodies,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
  stubs.push(s);
  return s;
}

const json = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
};

// In Node, JSON requests go over node:http unless a fetch is given: both paths get every test.
for (const via of ['node:http', 'fetch'] as const)
  describe(`HttpClient (${via})`, () => {
    const client = (o: ConstructorParameters<typeof HttpClient>[0]) =>
      new HttpClient({ ...o, ...(via === 'fetch' ? { fetch: globalThis.fetch } : {}) });

    it('sends the key as a Bearer header, JSON bodies and query strings', async () => {
      const s = await stub((_n, _req, res) => json(res, 200, { ok: true }));
      const c = client({ apiUrl: `${s.url}/`, apiKey: 'sk_test' });
      assert.deepEqual(
        await c.request('POST', '/api/v1/x', { json: { a: 1 }, query: { limit: 5, cursor: undefined } }),
        { ok: true },
      );
      assert.equal(s.seen[0].headers.authorization, 'Bearer sk_test');
      assert.equal(s.seen[0].headers['content-type'], 'application/json');
      assert.equal(s.seen[0].url, '/api/v1/x?limit=5');
      assert.equal(s.bodies[0], '{"a":1}');
    });

    it('retries a GET after 503 and 502, then succeeds', async () => {
      const s = await stub((n, _req, res) =>
        n < 2 ? json(res, n === 0 ? 503 : 502, { code: 503, message: 'busy' }) : json(res, 200, { n }),
      );
      const c = client({ apiUrl: s.url, apiKey: 'k', maxRetries: 2 });
      assert.deepEqual(await c.request('GET', '/api/v1/sandboxes'), { n: 2 });
      assert.equal(s.seen.length, 3);
    });

    it('gives up after maxRetries and throws the last typed error', async () => {
      const s = await stub((_n, _req, res) =>
        json(res, 503, { code: 503, message: 'Starting' }, { 'retry-after': '0' }),
      );
      const c = client({ apiUrl: s.url, apiKey: 'k', maxRetries: 2 });
      await assert.rejects(
        c.request('GET', '/x'),
        (e: unknown) => e instanceof ServiceUnavailableError && e.message === 'Starting',
      );
      assert.equal(s.seen.length, 3);
    });

    it('retries a GET after 429 as the server asks, to the millisecond when details say', async () => {
      const s = await stub((n, _req, res) =>
        n === 0
          ? json(
              res,
              429,
              { code: 429, message: 'slow down', details: { limit: 'account', retryAfterMs: 20 } },
              { 'retry-after': '1' },
            )
          : json(res, 200, { n }),
      );
      const c = client({ apiUrl: s.url, apiKey: 'k' });
      assert.deepEqual(await c.request('GET', '/api/v1/sandboxes'), { n: 1 });
      const limited = errorFromResponse(
        429,
        { code: 429, message: 'x', details: { retryAfterMs: 20 } },
        { retryAfter: '1' },
      );
      assert.ok(limited instanceof RateLimitError);
      assert.equal(retryWaitMs(limited, 0), 20, 'details.retryAfterMs wins over the whole seconds of Retry-After');
      assert.equal(retryWaitMs(errorFromResponse(429, { code: 429, message: 'x' }, { retryAfter: '2' }), 0), 2000);
      assert.equal(
        retryWaitMs(
          errorFromResponse(
            429,
            { code: 429, message: 'x', details: { retryAfterMs: 900_000 } },
            { retryAfter: '900' },
          ),
          0,
        ),
        10_000,
        'capped',
      );
      const posted = await stub((_n, _req, res) =>
        json(res, 429, { code: 429, message: 'slow down', details: { retryAfterMs: 1 } }),
      );
      await assert.rejects(
        client({ apiUrl: posted.url, apiKey: 'k' }).request('POST', '/api/v1/auth/login', { json: {} }),
        RateLimitError,
      );
      assert.equal(posted.seen.length, 1, 'a POST is never retried, not even after 429');
    });

    it('never retries a POST (a create must not run twice)', async () => {
      const s = await stub((_n, _req, res) => json(res, 503, { code: 503, message: 'busy' }));
      const c = client({ apiUrl: s.url, apiKey: 'k', maxRetries: 5 });
      await assert.rejects(c.request('POST', '/api/v1/sandboxes', { json: { image: 'x' } }), ServiceUnavailableError);
      assert.equal(s.seen.length, 1);
    });

    it('does not retry 4xx or 500', async () => {
      const s = await stub((n, _req, res) => json(res, n === 0 ? 400 : 500, { code: 400, message: 'bad' }));
      const c = client({ apiUrl: s.url, apiKey: 'k' });
      await assert.rejects(c.request('GET', '/a'), ValidationError);
      await assert.rejects(c.request('GET', '/b'), ServerError);
      assert.equal(s.seen.length, 2);
    });

    it('answers a request that gets no reply in time with RequestTimeoutError', async () => {
      const s = await stub(() => {
        /* never answers */
      });
      const c = client({ apiUrl: s.url, apiKey: 'k', timeoutMs: 200 });
      await assert.rejects(
        c.request('GET', '/slow'),
        (e: unknown) => e instanceof RequestTimeoutError && e.status === 0 && /200 ms/.test((e as Error).message),
      );
      assert.equal(s.seen.length, 1, 'a timed-out request is not retried');
    });

    it('reports an unreachable server as ConnectionError naming the URL', async () => {
      const s = await stub(() => {});
      await s.close();
      const c = client({ apiUrl: s.url, apiKey: 'k', maxRetries: 1 });
      await assert.rejects(
        c.request('GET', '/x'),
        (e: unknown) =>
          e instanceof ConnectionError && !(e instanceof RequestTimeoutError) && (e as Error).message.includes(s.url),
      );
    });

    it("rejects with the caller's abort reason", async () => {
      const s = await stub(() => {});
      const c = client({ apiUrl: s.url, apiKey: 'k' });
      const ctrl = new AbortController();
      const p = c.request('GET', '/x', { signal: ctrl.signal });
      const reason = new Error('stop');
      setImmediate(() => ctrl.abort(reason));
      await assert.rejects(p, (e: unknown) => e === reason);
    });

    it('keeps one connection for many requests; 204 is undefined; an answer cut short is a ConnectionError', async () => {
      const s = await stub((n, req, res) => {
        if (n < 3) return json(res, 200, { n });
        if (n === 3) {
          res.writeHead(204);
          return res.end();
        }
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
        res.write('{"cut":');
        setTimeout(() => req.socket.destroy(), 20);
      });
      const c = client({ apiUrl: s.url, apiKey: 'k', maxRetries: 0 });
      for (let i = 0; i < 3; i++) assert.deepEqual(await c.request('GET', '/x'), { n: i });
      // (undici's fetch may open a second connection while the first goes back to its pool.)
      if (via === 'node:http') assert.equal(new Set(s.seen.slice(0, 3).map((r) => r.socket)).size, 1, 'kept alive');
      assert.equal(await c.request('DELETE', '/x'), undefined);
      await assert.rejects(c.request('GET', '/cut'), ConnectionError);
    });

    it('reads SANDBOX_API_KEY and SANDBOX_API_URL when no option is given', () => {
      const saved = { key: process.env.SANDBOX_API_KEY, url: process.env.SANDBOX_API_URL };
      try {
        process.env.SANDBOX_API_KEY = 'sk_env';
        process.env.SANDBOX_API_URL = 'https://sbx.example.com/';
        const c = new HttpClient();
        assert.equal(c.config.apiKey, 'sk_env');
        assert.equal(c.config.apiUrl, 'https://sbx.example.com');
        delete process.env.SANDBOX_API_URL;
        assert.equal(new HttpClient().config.apiUrl, 'http://localhost:8080');
        assert.equal(new HttpClient({ apiKey: 'opt' }).config.apiKey, 'opt');
        assert.throws(() => new HttpClient({ apiUrl: 'localhost:8080' }), TypeError);
      } finally {
        for (const [k, v] of [
          ['SANDBOX_API_KEY', saved.key],
          ['SANDBOX_API_URL', saved.url],
        ] as const) {
          if (v === undefined) delete process.env[k];
          else process.env[k] = v;
        }
      }
    });
  });
