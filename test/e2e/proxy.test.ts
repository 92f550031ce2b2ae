/**
 * The port proxy against real sandboxes on the local (crun) runtime: `publicAccessUrlTemplate`
 * reached with curl and Node's fetch, streaming both ways with bounded server memory, SSE,
 * WebSocket, every error case, private ports, and Host tricks that must not reach anything
 * else. Skipped (with the reason) where the local runtime cannot run.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { request } from 'node:http';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import WebSocket from 'ws';
import {
  hget,
  localUnavailable,
  loopbackDispatcher,
  rssBytes,
  startLocalServer,
  startPyApp,
  waitListening,
  type LocalServer,
} from './proxy-support.js';

const run = promisify(execFile);
const curl = async (...args: string[]) =>
  (await run('curl', ['-sS', '-m', '60', ...args], { maxBuffer: 1 << 20 })).stdout;
const MiB = 1024 * 1024;
const skip = localUnavailable();

describe('port proxy e2e (local runtime)', { skip: skip ?? false }, () => {
  let s: LocalServer;
  let web: { id: string; url: (p: number) => string };
  let app: { id: string; name: string; url: (p: number) => string };
  const host = (url: string) => url.replace(/^http:\/\//, '');
  const sandbox = async (image: string, o: { key?: string; body?: Record<string, unknown> } = {}) => {
    const c = await s.api('POST', '/api/v1/sandboxes', { key: o.key, body: { image, ...o.body } });
    assert.equal(c.status, 201, c.text);
    const sb = c.body.sandbox;
    return {
      id: sb.id as string,
      name: sb.name as string,
      url: (p: number) => `http://${sb.publicAccessUrlTemplate.replace('{{PORT}}', String(p))}`,
    };
  };

  before(async () => {
    s = await startLocalServer({ SANDBOXD_PROXY_TIMEOUT_MS: '2000', SANDBOXD_PROXY_MAX_CONNS_PER_SANDBOX: '8' });
    web = await sandbox('local/busybox:latest');
    const page = await s.api('POST', `/api/v1/sandboxes/${web.id}/exec`, {
      body: { command: `mkdir -p /www && echo "hello from ${web.id}" > /www/index.html` },
    });
    assert.equal(page.body.exitCode, 0);
    await s.api('POST', `/api/v1/sandboxes/${web.id}/exec`, {
      body: { command: 'busybox httpd -f -p 8000 -h /www', options: { background: true } },
    });
    app = await sandbox('local/debian:bookworm');
    await startPyApp(s, app.id, 8000);
    await waitListening(s, host(web.url(8000)));
    await waitListening(s, host(app.url(8000)), '/echo');
  });
  after(async () => {
    await s?.teardown();
  });

  it('busybox httpd through the template URL: curl (*.localhost, --resolve), Node fetch, Node http with Host', async () => {
    const want = `hello from ${web.id}\n`;
    assert.equal(await curl(`${web.url(8000)}/`), want);
    const name = host(web.url(8000)).split(':')[0];
    assert.equal(await curl('--resolve', `${name}:${s.port}:127.0.0.1`, `${web.url(8000)}/index.html`), want);
    const dispatcher = loopbackDispatcher();
    try {
      const r = await fetch(`${web.url(8000)}/`, { dispatcher } as RequestInit);
      assert.equal(r.status, 200);
      assert.equal(await r.text(), want);
    } finally {
      await dispatcher.close();
    }
    assert.equal((await hget(s.port, host(web.url(8000)), { path: '/' })).body, want);
  });

  it('any method reaches the sandbox with Host kept and X-Forwarded-For/Proto/Host set', async () => {
    const h = host(app.url(8000));
    const echo = JSON.parse(
      (await hget(s.port, h, { path: '/echo?a=1', headers: { 'x-forwarded-for': '198.51.100.7' } })).body,
    );
    assert.equal(echo.path, '/echo?a=1');
    assert.equal(echo.hostname, app.name);
    assert.equal(echo.headers.host, h);
    assert.equal(echo.headers['X-Forwarded-For'], '198.51.100.7, 127.0.0.1');
    assert.equal(echo.headers['X-Forwarded-Proto'], 'http');
    assert.equal(echo.headers['X-Forwarded-Host'], h);
    assert.equal(echo.client, s.subnet.replace(/0\/24$/, '1'), 'the app sees the proxy on the bridge');
    for (const method of ['POST', 'PUT', 'PATCH', 'DELETE']) {
      const r = JSON.parse((await hget(s.port, h, { method, path: '/x', body: 'abc' })).body);
      assert.deepEqual([r.method, r.bytes], [method, 3]);
    }
  });

  it('streams a 64 MiB upload (chunked) into the sandbox intact', async () => {
    const chunk = Buffer.alloc(MiB, 5);
    const want = createHash('sha256');
    const body = await new Promise<string>((resolve, reject) => {
      const req = request(
        { host: '127.0.0.1', port: s.port, method: 'POST', path: '/upload', headers: { host: host(app.url(8000)) } },
        (res) => {
          let b = '';
          res.on('data', (c) => (b += c));
          res.on('end', () => resolve(b));
        },
      );
      req.on('error', reject);
      let i = 0;
      const pump = (): void => {
        for (; i < 64; i++) {
          want.update(chunk);
          if (!req.write(chunk)) {
            i++;
            req.once('drain', pump);
            return;
          }
        }
        req.end();
      };
      pump();
    });
    const r = JSON.parse(body);
    assert.deepEqual([r.bytes, r.sha256], [64 * MiB, want.digest('hex')]);
  });

  it('a 100 MiB download streams with flat server memory, also to a reader that stops reading', async (t) => {
    const pid = s.proc.pid!;
    const url = `${app.url(8000)}/bytes?n=${100 * MiB}`;
    await curl('-o', '/dev/null', `${app.url(8000)}/bytes?n=${4 * MiB}`); // warm up
    const base = rssBytes(pid);
    let peak = base;
    const sampler = setInterval(() => (peak = Math.max(peak, rssBytes(pid))), 20);
    const out = await curl('-o', '/dev/null', '-w', '%{http_code} %{size_download}', url).finally(() =>
      clearInterval(sampler),
    );
    assert.equal(out, `200 ${100 * MiB}`);
    t.diagnostic(
      `server RSS ${(base / MiB).toFixed(1)} MiB before, peak +${((peak - base) / MiB).toFixed(1)} MiB during a 100 MiB download`,
    );
    assert.ok(peak - base < 48 * MiB, `server RSS grew ${((peak - base) / MiB).toFixed(1)} MiB for a 100 MiB download`);

    // A client that reads one chunk and stops: backpressure must hold the sandbox back.
    const paused = rssBytes(pid);
    let stalledPeak = paused;
    const total = await new Promise<number>((resolve, reject) => {
      request(
        { host: '127.0.0.1', port: s.port, path: `/bytes?n=${100 * MiB}`, headers: { host: host(app.url(8000)) } },
        (res) => {
          let n = 0;
          res.once('data', (c: Buffer) => {
            n += c.length;
            res.pause();
            let samples = 0;
            const t = setInterval(() => {
              stalledPeak = Math.max(stalledPeak, rssBytes(pid));
              if (++samples < 25) return;
              clearInterval(t);
              res.on('data', (d: Buffer) => (n += d.length));
              res.resume();
            }, 40);
          });
          res.on('end', () => resolve(n));
          res.on('error', reject);
        },
      )
        .on('error', reject)
        .end();
    });
    assert.equal(total, 100 * MiB);
    t.diagnostic(
      `server RSS peak +${((stalledPeak - paused) / MiB).toFixed(1)} MiB while the reader was stalled for 1 s`,
    );
    assert.ok(
      stalledPeak - paused < 32 * MiB,
      `server RSS grew ${((stalledPeak - paused) / MiB).toFixed(1)} MiB while the reader was stalled`,
    );
  });

  it('server-sent events arrive as they are sent', async () => {
    const h = host(app.url(8000));
    const chunks: string[] = [];
    await new Promise<void>((resolve, reject) => {
      request(
        { host: '127.0.0.1', port: s.port, path: '/sse', headers: { host: h, accept: 'text/event-stream' } },
        (res) => {
          assert.equal(res.headers['content-type'], 'text/event-stream');
          res.setEncoding('utf8');
          res.on('data', (c: string) => {
            chunks.push(c);
            if (chunks.length === 1) void hget(s.port, h, { path: '/release' }); // the sandbox still holds the stream open
          });
          res.on('end', () => resolve());
        },
      )
        .on('error', reject)
        .end();
    });
    assert.equal(chunks[0], 'data: one\n\n');
    assert.equal(chunks.join(''), 'data: one\n\ndata: two\n\n');
  });

  it('a WebSocket echo server in the sandbox, through the proxy', async () => {
    const ws = new WebSocket(`ws://127.0.0.1:${s.port}/ws`, {
      headers: { host: host(app.url(8000)) },
      handshakeTimeout: 20_000,
    });
    await new Promise((r, j) => {
      ws.once('open', r);
      ws.once('error', j);
    });
    const roundTrip = (d: string | Buffer) =>
      new Promise<Buffer>((r) => {
        ws.once('message', (m: Buffer) => r(m));
        ws.send(d);
      });
    assert.equal((await roundTrip('hello sandbox')).toString(), 'hello sandbox');
    const big = createHash('sha512').update('x').digest().subarray(0, 64);
    const payload = Buffer.concat(Array.from({ length: 4096 }, () => big));
    assert.ok((await roundTrip(payload)).equals(payload));
    ws.close();
  });

  it('no request smuggling: Connection naming Content-Length still frames the body for a keep-alive app', async () => {
    const h = host(app.url(8000));
    const smuggled = `GET /echo?smuggled=1 HTTP/1.1\r\nHost: ${h}\r\n\r\n`;
    const raw = (bytes: string) =>
      new Promise<string>((resolve, reject) => {
        const c = connect({ host: '127.0.0.1', port: s.port });
        let out = '';
        c.setEncoding('latin1');
        c.setTimeout(20_000, () => c.destroy(new Error('raw request timed out')));
        c.on('data', (d: string) => {
          out += d;
          const end = out.indexOf('\r\n\r\n');
          const m = /\r\ncontent-length: (\d+)\r\n/i.exec(out);
          if (end !== -1 && m && out.length >= end + 4 + Number(m[1])) c.end();
        });
        c.on('close', () => resolve(out));
        c.on('error', reject);
        c.write(bytes, 'latin1');
      });
    for (const nominated of ['Content-Length', 'keep-alive, Content-Length, Transfer-Encoding']) {
      const answer = await raw(
        `POST /x HTTP/1.1\r\nHost: ${h}\r\nConnection: ${nominated}\r\n` +
          `Content-Length: ${smuggled.length}\r\n\r\n${smuggled}`,
      );
      const r = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4));
      assert.deepEqual([r.method, r.bytes], ['POST', smuggled.length], 'the app read the whole body as the body');
      // The next visitor on the (pooled) connection gets the answer to its own request.
      for (let i = 0; i < 3; i++) {
        const next = JSON.parse((await hget(s.port, h, { path: `/echo?visitor=${i}` })).body);
        assert.equal(next.path, `/echo?visitor=${i}`);
      }
    }
    const refused = await raw(
      `POST /x HTTP/1.1\r\nHost: ${h}\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n`,
    );
    assert.match(refused, /^HTTP\/1\.1 400 /);
  });

  it('fair share: a sandbox at its 8 proxied connections gets 503 with Retry-After; a neighbour still answers', async () => {
    const h = host(app.url(8000));
    assert.equal((await hget(s.port, h, { path: '/echo' })).status, 200);
    // Uploads that never finish hold their connection (an upload is not timed out), so no timing is involved.
    const held = Array.from({ length: 8 }, () => {
      const c = connect({ host: '127.0.0.1', port: s.port });
      c.on('error', () => {});
      c.write(`POST /upload HTTP/1.1\r\nHost: ${h}\r\nContent-Length: 1000000\r\n\r\npart of it`);
      return c;
    });
    try {
      let r = await hget(s.port, h, { path: '/echo' });
      for (let i = 0; i < 100 && r.status !== 503; i++) {
        await new Promise((res) => setTimeout(res, 50));
        r = await hget(s.port, h, { path: '/echo' });
      }
      assert.equal(r.status, 503, 'the noisy sandbox is refused at its share');
      assert.equal(r.headers['retry-after'], '1');
      const body = JSON.parse(r.body);
      assert.deepEqual([body.kind, body.details.resource, body.details.limit], ['capacity', 'proxy_connections', 8]);
      const neighbour = await hget(s.port, host(web.url(8000)), { path: '/' });
      assert.deepEqual([neighbour.status, neighbour.body], [200, `hello from ${web.id}\n`], 'the neighbour answers');
    } finally {
      for (const c of held) c.destroy();
    }
    let back = await hget(s.port, h, { path: '/echo' });
    for (let i = 0; i < 100 && back.status === 503; i++) {
      await new Promise((res) => setTimeout(res, 50));
      back = await hget(s.port, h, { path: '/echo' });
    }
    assert.equal(back.status, 200, 'the share comes back once its connections end');
  });

  it('errors: 404 unknown or deleted, 400 port out of range, 502 names the port, 504 when slow, HTML for browsers', async () => {
    const gone = await sandbox('local/busybox:latest');
    assert.equal((await s.api('DELETE', `/api/v1/sandboxes/${gone.id}`)).status, 204);
    for (const url of [gone.url(8000), app.url(8000).replace(app.id, `sbx_${'q'.repeat(20)}`)]) {
      const r = await hget(s.port, host(url));
      assert.equal(r.status, 404, url);
      assert.deepEqual(Object.keys(JSON.parse(r.body)).sort(), ['code', 'details', 'kind', 'message']);
    }
    for (const p of [0, 65536]) assert.equal((await hget(s.port, host(app.url(p)))).status, 400);
    const r502 = await hget(s.port, host(app.url(8001)));
    assert.equal(r502.status, 502);
    assert.equal(JSON.parse(r502.body).message, `Nothing is listening on port 8001 of sandbox ${app.id}`);
    const r504 = await hget(s.port, host(app.url(8000)), { path: '/slow' });
    assert.equal(r504.status, 504);
    assert.equal(JSON.parse(r504.body).details.timeoutMs, 2000);
    const page = await curl('-H', 'Accept: text/html', '-w', '\n%{http_code} %{content_type}', app.url(8001));
    assert.match(page, /<h1>502 Bad Gateway<\/h1>/);
    assert.match(page, /Nothing is listening on port 8001/);
    assert.match(page, /\n502 text\/html; charset=utf-8$/);
  });
});
