/**
 * The in-sandbox code server (images/code-interpreter/server/) in real `local/code-interpreter`
 * sandboxes on the local (crun) runtime, driven with raw HTTP through sandboxd's port proxy
 * (port 49999): E2B's code-interpreter protocol, result formats, contexts, env vars,
 * interrupts, and recovery from a dead kernel and a dead server. Skipped (with the reason)
 * where the local runtime or the image is missing.
 */
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { ADMIN_KEY, newAccount } from '../harness.js';
import { hget, localUnavailable, startLocalServer, type LocalServer } from '../proxy-support.js';
import { ImageStore } from '../../../packages/server/src/runtime/local/images/store.js';
import { resolve } from 'node:path';

const IMAGE = 'local/code-interpreter';
const IMAGE_DIR = process.env.SANDBOXD_TEST_IMAGE_DIR ?? resolve(import.meta.dirname, '../../../.sandboxd-test/images');
const PORT = 49999;

async function imageMissing(): Promise<string | null> {
  const why = localUnavailable();
  if (why) return why;
  // Set-up builds the image: a missing one fails the suite (it is never skipped).
  assert.ok(await new ImageStore({ dir: IMAGE_DIR }).has(IMAGE), `${IMAGE} is not built (npm run setup)`);
  return null;
}
const skip = await imageMissing();

interface Line {
  type: string;
  [k: string]: any;
}

describe('code server in local/code-interpreter (local runtime)', { skip: skip ?? false, timeout: 900_000 }, () => {
  let s: LocalServer;
  let id: string;
  let host: string;

  /** One request to the code server through the proxy; `onLine` sees each NDJSON line as it comes. */
  const call = (
    method: string,
    path: string,
    body?: unknown,
    o: { onLine?: (l: Line, abort: () => void) => void; timeoutMs?: number; key?: string | null } = {},
  ): Promise<{ status: number; text: string; lines: Line[]; aborted: boolean }> =>
    new Promise((res, rej) => {
      const data = body === undefined ? undefined : JSON.stringify(body);
      const req = request({
        host: '127.0.0.1',
        port: s.port,
        method,
        path,
        // The code port runs code for the owner only (its key; codePortGuard), public ports or not.
        headers: {
          host,
          ...(o.key !== null ? { 'x-sandboxd-key': o.key ?? ADMIN_KEY } : {}),
          ...(data ? { 'content-type': 'application/json' } : {}),
        },
        agent: false,
      });
      const lines: Line[] = [];
      let text = '';
      let aborted = false;
      const timer = setTimeout(
        () => req.destroy(new Error(`${method} ${path}: no answer in time`)),
        o.timeoutMs ?? 120_000,
      );
      req.on('response', (r) => {
        let buf = '';
        r.setEncoding('utf8');
        r.on('data', (d: string) => {
          text += d;
          buf += d;
          let i = buf.indexOf('\n');
          while (i >= 0) {
            const raw = buf.slice(0, i);
            buf = buf.slice(i + 1);
            i = buf.indexOf('\n');
            if (!raw.trim() || !(r.headers['content-type'] ?? '').includes('ndjson')) continue;
            const l = JSON.parse(raw) as Line;
            lines.push(l);
            o.onLine?.(l, () => {
              aborted = true;
              clearTimeout(timer);
              req.destroy();
              res({ status: r.statusCode ?? 0, text, lines, aborted });
            });
          }
        });
        r.on('end', () => {
          clearTimeout(timer);
          res({ status: r.statusCode ?? 0, text, lines, aborted });
        });
        r.on('error', (e) => {
          if (!aborted) rej(e);
        });
      });
      req.on('error', (e) => {
        clearTimeout(timer);
        if (!aborted) rej(e);
      });
      req.end(data);
    });

  /** POST /execute; returns its lines without keepalives, checking the stream's framing. */
  const run = async (body: Record<string, unknown>) => {
    const r = await call('POST', '/execute', body);
    assert.equal(r.status, 200, r.text);
    const lines = r.lines.filter((l) => l.type !== 'keepalive');
    assert.deepEqual(lines.at(-1), { type: 'end_of_execution' }, r.text);
    const out = (t: string) => lines.filter((l) => l.type === t);
    return {
      lines,
      stdout: out('stdout')
        .map((l) => l.text)
        .join(''),
      stderr: out('stderr')
        .map((l) => l.text)
        .join(''),
      results: out('result'),
      main: out('result').find((l) => l.is_main_result),
      error: out('error')[0],
      count: out('number_of_executions')[0]?.execution_count as number | undefined,
    };
  };
  const exec = async (command: string) => {
    const r = await s.api('POST', `/api/v1/sandboxes/${id}/exec`, { body: { command } });
    assert.equal(r.status, 200, r.text);
    return r.body as { exitCode: number; stdout: string; stderr: string };
  };
  const healthy = async (ms: number) => {
    const until = Date.now() + ms;
    while (Date.now() < until) {
      const r = await hget(s.port, host, { path: '/health' }).catch(() => null);
      if (r?.status === 200) return true;
      await new Promise((r) => setTimeout(r, 200));
    }
    return false;
  };

  before(async () => {
    s = await startLocalServer();
    const c = await s.api('POST', '/api/v1/sandboxes', {
      body: { image: IMAGE, env: { SBX_CI_SANDBOX_VAR: 'from-sandbox' } },
    });
    assert.equal(c.status, 201, c.text);
    id = c.body.sandbox.id;
    host = c.body.sandbox.publicAccessUrlTemplate.replace('{{PORT}}', String(PORT));
    // The runtime answered the create only once /health did (the image's declared service).
    assert.ok(await healthy(5_000), '/health answers 200');
  });
  after(async () => {
    await s?.teardown();
  });

  it('through the public port proxy, running code needs the owner’s key (any spelling of /execute); /health does not', async () => {
    for (const path of ['/execute', '//execute', '/execute/']) {
      const r = await call('POST', path, { code: 'open("/tmp/ran-without-key", "w").write("x")' }, { key: null });
      assert.equal(r.status, 401, `${path}: ${r.text}`);
    }
    const other = (await newAccount(s)).key;
    const stranger = await call('POST', '/execute', { code: 'open("/tmp/ran-without-key", "w")' }, { key: other });
    assert.equal(stranger.status, 401, `another account's key: ${stranger.text}`);
    const health = await call('GET', '/health', undefined, { key: null });
    assert.equal(health.status, 200, health.text);
    const ran = await exec('test -e /tmp/ran-without-key && echo ran || echo none');
    assert.equal(ran.stdout.trim(), 'none');
  });

  it('an upgrade to an allowed path cannot carry a request to run code behind it (the tunnel is not checked)', async () => {
    const code = JSON.stringify({ code: 'open("/tmp/smuggled", "w").write("x")' });
    const raw =
      `GET /health HTTP/1.1\r\nHost: ${host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n` +
      `POST /execute HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\nContent-Length: ${code.length}\r\n\r\n${code}`;
    const answer = await new Promise<string>((resolve) => {
      const sock = connect(s.port, '127.0.0.1');
      let got = '';
      const done = () => resolve(got);
      sock.setTimeout(10_000, () => sock.destroy());
      sock.on('data', (d: Buffer) => {
        got += d.toString('latin1');
      });
      sock.on('close', done);
      sock.on('error', done);
      sock.write(raw);
    });
    assert.match(answer, /^HTTP\/1\.1 401/, answer.slice(0, 200));
    const ran = await exec('test -e /tmp/smuggled && echo ran || echo none');
    assert.equal(ran.stdout.trim(), 'none');
  });

  it('another sandbox cannot reach the code server (port 49999 on 0.0.0.0); the sandbox itself can', async () => {
    const probe = (addr: string) =>
      `python3 -c "import socket; s = socket.socket(); s.settimeout(2); r = s.connect_ex(('${addr}', ${PORT})); print('open' if r == 0 else 'closed')" 2>&1 || echo failed`;
    const addr = (await exec("hostname -I | awk '{print $1}'")).stdout.trim();
    assert.match(addr, /^\d+\.\d+\.\d+\.\d+$/);
    assert.equal((await exec(probe(addr))).stdout.trim(), 'open', 'the probe can see an open port');
    const b = await s.api('POST', '/api/v1/sandboxes', { body: { image: 'local/debian:bookworm' } });
    assert.equal(b.status, 201, b.text);
    try {
      const r = await s.api('POST', `/api/v1/sandboxes/${b.body.sandbox.id}/exec`, { body: { command: probe(addr) } });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.body.stdout.trim(), 'closed', `a neighbour's probe of ${addr}:${PORT}`);
    } finally {
      await s.api('DELETE', `/api/v1/sandboxes/${b.body.sandbox.id}`);
    }
  });

  it('GET /health answers "OK"; the default Python context is listed', async () => {
    const h = await call('GET', '/health');
    assert.equal(h.status, 200);
    assert.equal(JSON.parse(h.text), 'OK');
    const list = await call('GET', '/contexts');
    const ctx = JSON.parse(list.text) as { id: string; language: string; cwd: string }[];
    assert.ok(
      ctx.some((c) => c.language === 'python' && c.cwd === '/home/user'),
      list.text,
    );
  });

  it('runs Python: stdout, stderr, the last expression as main result, execution count', async () => {
    const r = await run({ code: 'import sys\nprint("hello")\nprint("oops", file=sys.stderr)\n40 + 2' });
    assert.equal(r.stdout, 'hello\n');
    assert.equal(r.stderr, 'oops\n');
    assert.equal(r.main?.text, '42');
    assert.equal(typeof r.count, 'number');
    assert.ok(!r.error);
    const stdoutLine = r.lines.find((l) => l.type === 'stdout');
    assert.ok(!Number.isNaN(Date.parse(stdoutLine?.timestamp)), 'stdout carries a timestamp');
    const next = await run({ code: '1' });
    assert.equal(next.count, (r.count ?? 0) + 1, 'each run counts one execution');
    const str = await run({ code: '"quoted"' });
    assert.equal(str.main?.text, 'quoted', 'one pair of quotes is stripped as E2B does');
  });

  it('state persists in a context; display() outputs are not the main result', async () => {
    await run({ code: 'x = 20' });
    const r = await run({ code: 'from IPython.display import display, HTML\ndisplay(HTML("<b>hi</b>"))\nx * 2' });
    assert.equal(r.results.length, 2);
    assert.equal(r.results[0].is_main_result, false);
    assert.equal(r.results[0].html, '<b>hi</b>');
    assert.equal(r.main?.text, '40');
  });

  it('maps every MIME representation to its E2B field', async () => {
    const code = [
      'from IPython.display import display, Markdown, SVG, Latex, JSON, Javascript, Image, HTML',
      'import base64',
      'PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")',
      'display(Markdown("**md**"))',
      'display(SVG(\'<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"></svg>\'))',
      'display(Latex(r"$x^2$"))',
      'display(JSON({"a": 1}))',
      'display(Javascript("console.log(1)"))',
      'display(Image(data=PNG, format="png"))',
      'class J:',
      '    def _repr_jpeg_(self): return base64.b64encode(b"jpegbytes").decode()',
      '    def _repr_pdf_(self): return base64.b64encode(b"%PDF-1.4").decode()',
      '    def _repr_mimebundle_(self, include=None, exclude=None): return {"application/x-custom": "custom", "text/plain": "J()"}',
      'display(J())',
      '{"k": [1, 2]}',
    ].join('\n');
    const r = await run({ code });
    assert.ok(!r.error, JSON.stringify(r.error));
    const field = (f: string) => r.results.find((x) => x[f] !== undefined);
    assert.equal(field('markdown')?.markdown, '**md**');
    assert.match(field('svg')?.svg, /<svg/);
    assert.equal(field('latex')?.latex, '$x^2$');
    assert.deepEqual(field('json')?.json, { a: 1 });
    assert.equal(field('javascript')?.javascript, 'console.log(1)');
    assert.match(field('png')?.png, /^iVBORw0KGgo/);
    assert.equal(field('jpeg')?.jpeg, Buffer.from('jpegbytes').toString('base64'));
    assert.equal(field('pdf')?.pdf, Buffer.from('%PDF-1.4').toString('base64'));
    const custom = r.results.find((x) => x.extra?.['application/x-custom']);
    assert.equal(custom?.extra['application/x-custom'], 'custom', 'unknown MIME types go to extra');
    assert.deepEqual(r.main?.json, { k: [1, 2] }, 'a dict result carries json');
    assert.equal(r.main?.is_main_result, true);
  });

  it('a pandas DataFrame result carries html, text and data {column: values}', async () => {
    const r = await run({
      code: 'import pandas as pd\npd.DataFrame({"a": [1, 2], "b": ["x", None], "t": pd.to_datetime(["2024-01-01", "2024-01-02"])})',
    });
    assert.ok(!r.error, JSON.stringify(r.error));
    assert.match(r.main?.html, /<table/);
    assert.match(r.main?.text, /a/);
    assert.deepEqual(r.main?.data, {
      a: [1, 2],
      b: ['x', null],
      t: ['2024-01-01T00:00:00', '2024-01-02T00:00:00'],
    });
  });

  it('matplotlib figures come as png plus a chart: line, scatter, bar, pie, box, superchart', async () => {
    const code = [
      'import matplotlib.pyplot as plt',
      'fig, ax = plt.subplots()',
      'ax.plot([1, 2, 3], [2, 4, 8], label="growth")',
      'ax.set_title("Line"); ax.set_xlabel("Time (s)"); ax.set_ylabel("Size [MB]")',
      'plt.show()',
      'fig, ax = plt.subplots(); ax.scatter([1, 2], [3, 4], label="pts"); plt.show()',
      'fig, ax = plt.subplots(); ax.bar(["a", "b"], [3, 5], label="sales"); ax.set_title("Bars"); plt.show()',
      'fig, ax = plt.subplots(); ax.pie([1, 3], labels=["one", "three"]); plt.show()',
      'fig, ax = plt.subplots(); ax.boxplot([[1, 2, 3, 4, 5, 100]], labels=["g"]); plt.show()',
      'fig, (a1, a2) = plt.subplots(1, 2); a1.plot([1, 2]); a2.bar(["q"], [1]); fig.suptitle("Both"); plt.show()',
    ].join('\n');
    const r = await run({ code });
    assert.ok(!r.error, JSON.stringify(r.error));
    const charts = r.results.filter((x) => x.chart).map((x) => x.chart);
    assert.equal(charts.length, 6, JSON.stringify(r.results.map((x) => Object.keys(x))));
    for (const x of r.results.filter((x) => x.chart)) {
      assert.match(x.png, /^iVBORw0KGgo/, 'the figure image is there too');
      assert.equal(x.is_main_result, false);
    }
    const [line, scatter, bar, pie, box, sup] = charts;
    assert.equal(line.type, 'line');
    assert.equal(line.title, 'Line');
    assert.deepEqual([line.x_label, line.x_unit, line.y_unit], ['Time (s)', 's', 'MB']);
    assert.deepEqual(line.elements, [
      {
        label: 'growth',
        points: [
          [1, 2],
          [2, 4],
          [3, 8],
        ],
      },
    ]);
    assert.equal(line.x_scale, 'linear');
    assert.equal(scatter.type, 'scatter');
    assert.deepEqual(scatter.elements[0].points, [
      [1, 3],
      [2, 4],
    ]);
    assert.equal(bar.type, 'bar');
    assert.deepEqual(
      bar.elements.map((e: any) => [e.label, e.value, e.group]),
      [
        ['a', 3, 'sales'],
        ['b', 5, 'sales'],
      ],
    );
    assert.equal(pie.type, 'pie');
    assert.deepEqual(
      pie.elements.map((e: any) => [e.label, e.angle]),
      [
        ['one', 90],
        ['three', 270],
      ],
    );
    assert.equal(box.type, 'box_and_whisker');
    assert.equal(box.elements[0].label, 'g');
    assert.equal(box.elements[0].median, 3.5);
    assert.deepEqual(box.elements[0].outliers, [100]);
    assert.equal(sup.type, 'superchart');
    assert.equal(sup.title, 'Both');
    assert.deepEqual(
      sup.elements.map((e: any) => e.type),
      ['line', 'bar'],
    );
  });

  it('an error gives name, value and a traceback; the context keeps working', async () => {
    const r = await run({ code: 'def f():\n    return 1 / 0\nf()' });
    assert.equal(r.error?.name, 'ZeroDivisionError');
    assert.equal(r.error?.value, 'division by zero');
    assert.match(r.error?.traceback, /ZeroDivisionError/);
    assert.match(r.error?.traceback, /return 1 \/ 0/);
    assert.ok(!r.error?.traceback.includes('\u001b['), 'no colour codes');
    assert.equal((await run({ code: '"still here"' })).main?.text, 'still here');
  });

  it('runs as user with HOME /home/user in cwd /home/user; contexts honour their cwd', async () => {
    const r = await run({
      code: 'import os, getpass\nprint(getpass.getuser(), os.getuid(), os.environ["HOME"], os.getcwd())',
    });
    assert.equal(r.stdout, 'user 1000 /home/user /home/user\n');
    const c = await call('POST', '/contexts', { language: 'python', cwd: '/tmp' });
    assert.equal(c.status, 200, c.text);
    const ctx = JSON.parse(c.text);
    assert.deepEqual([ctx.language, ctx.cwd], ['python', '/tmp']);
    assert.equal((await run({ code: 'import os; os.getcwd()', context_id: ctx.id })).main?.text, '/tmp');
    const bad = await call('POST', '/contexts', { language: 'python', cwd: '/no/such/dir' });
    assert.equal(bad.status, 500);
    assert.match(bad.text, /working directory/);
  });

  it('contexts are independent; listed, restarted (state gone) and removed', async () => {
    const a = JSON.parse((await call('POST', '/contexts', { language: 'python' })).text);
    const b = JSON.parse((await call('POST', '/contexts', {})).text);
    assert.equal(b.language, 'python', 'language defaults to python');
    await run({ code: 'v = "A"', context_id: a.id });
    await run({ code: 'v = "B"', context_id: b.id });
    assert.equal((await run({ code: 'v', context_id: a.id })).main?.text, 'A');
    assert.equal((await run({ code: 'v', context_id: b.id })).main?.text, 'B');
    const ids = (JSON.parse((await call('GET', '/contexts')).text) as { id: string }[]).map((c) => c.id);
    assert.ok(ids.includes(a.id) && ids.includes(b.id));
    const rs = await call('POST', `/contexts/${a.id}/restart`);
    assert.equal(rs.status, 200, rs.text);
    assert.equal((await run({ code: 'v', context_id: a.id })).error?.name, 'NameError', 'restart drops state');
    assert.equal((await run({ code: 'v', context_id: b.id })).main?.text, 'B', 'the other context is untouched');
    assert.equal((await call('DELETE', `/contexts/${a.id}`)).status, 200);
    const after = (JSON.parse((await call('GET', '/contexts')).text) as { id: string }[]).map((c) => c.id);
    assert.ok(!after.includes(a.id));
    await call('DELETE', `/contexts/${b.id}`);
  });

  it("answers E2B's errors: unknown context 404, context and language 400, unknown language 500, bad body 422", async () => {
    const nf = await call('POST', '/execute', { code: '1', context_id: 'nope' });
    assert.deepEqual([nf.status, nf.text], [404, 'Context nope not found']);
    const both = await call('POST', '/execute', { code: '1', context_id: 'x', language: 'python' });
    assert.deepEqual([both.status, both.text], [400, 'Only one of context_id or language can be provided']);
    const lang = await call('POST', '/execute', { code: '1', language: 'cobol' });
    assert.equal(lang.status, 500);
    assert.match(lang.text, /cobol/);
    assert.equal((await call('POST', '/contexts', { language: 'cobol' })).status, 500);
    assert.equal((await call('DELETE', '/contexts/nope')).status, 404);
    assert.equal((await call('POST', '/contexts/nope/restart')).status, 404);
    assert.equal((await call('POST', '/execute', { context_id: 'x' })).status, 422);
  });

  it('env_vars apply to one run only; sandbox envs (envs.json) apply to every run', async () => {
    const read = 'import os\nprint(os.environ.get("SBX_RUN_VAR"), os.environ.get("SBX_CI_SANDBOX_VAR"))';
    const r = await run({ code: read, env_vars: { SBX_RUN_VAR: 'per-run', SBX_CI_SANDBOX_VAR: 'overridden' } });
    assert.equal(r.stdout, 'per-run overridden\n');
    const next = await run({ code: read });
    assert.equal(next.stdout, 'None from-sandbox\n', 'the per-run value is undone, the sandbox one is back');
    const sub = await run({
      code: 'import subprocess\nsubprocess.run(["sh", "-c", "echo $SBX_RUN_VAR"])',
      env_vars: { SBX_RUN_VAR: 'child' },
    });
    assert.equal(sub.stdout, 'child\n', 'child processes see per-run env vars');
  });

  it('a client that disconnects interrupts its run; the next run in that context is not stuck', async () => {
    const c = JSON.parse((await call('POST', '/contexts', { language: 'python' })).text);
    const r = await call(
      'POST',
      '/execute',
      { code: 'import time\nprint("started", flush=True)\nwhile True:\n    time.sleep(0.1)', context_id: c.id },
      { onLine: (l, abort) => l.type === 'stdout' && abort() },
    );
    assert.equal(r.aborted, true);
    const next = await run({ code: 'print("next")', context_id: c.id });
    assert.equal(next.stdout, 'next\n');
    // The interrupted run's KeyboardInterrupt was not delivered to this run.
    assert.ok(!next.error, JSON.stringify(next.error));
    // A silent busy run (no output at all) is interrupted too.
    const silent = call(
      'POST',
      '/execute',
      { code: 'while True:\n    pass', context_id: c.id },
      { onLine: (l, abort) => l.type === 'number_of_executions' && abort() },
    );
    assert.equal((await silent).aborted, true);
    assert.equal((await run({ code: '7 * 6', context_id: c.id })).main?.text, '42');
    await call('DELETE', `/contexts/${c.id}`);
  });

  it('a restart ends a run in progress with ContextRestarting instead of waiting for it', async () => {
    const c = JSON.parse((await call('POST', '/contexts', { language: 'python' })).text);
    let started!: () => void;
    const busy = new Promise<void>((r) => (started = r));
    const running = call(
      'POST',
      '/execute',
      { code: 'print("busy", flush=True)\nwhile True:\n    pass', context_id: c.id },
      { onLine: (l) => l.type === 'stdout' && started() },
    );
    await busy;
    assert.equal((await call('POST', `/contexts/${c.id}/restart`)).status, 200);
    const r = await running;
    assert.equal(r.lines.find((l) => l.type === 'error')?.name, 'ContextRestarting');
    assert.equal((await run({ code: '1 + 1', context_id: c.id })).main?.text, '2');
    await call('DELETE', `/contexts/${c.id}`);
  });

  it('a run past its timeout is interrupted with a TimeoutError', async () => {
    const r = await run({ code: 'import time\ntime.sleep(60)', timeout: 1 });
    assert.equal(r.error?.name, 'TimeoutError');
    assert.equal((await run({ code: '"after"' })).main?.text, 'after');
  });

  it('runs in one context are serialized; different contexts run in parallel', async () => {
    const c = JSON.parse((await call('POST', '/contexts', { language: 'python' })).text);
    const d = JSON.parse((await call('POST', '/contexts', { language: 'python' })).text);
    await run({ code: 'import time, threading\nlog = []', context_id: c.id });
    // The first run waits for a file that only a run in the other context writes.
    const first = run({
      code: 'import os, time\nfor _ in range(600):\n    if os.path.exists("/tmp/sbx-go"): break\n    time.sleep(0.1)\nlog.append("first")\nos.path.exists("/tmp/sbx-go")',
      context_id: c.id,
    });
    const second = run({ code: 'log.append("second")\nlog', context_id: c.id });
    const other = await run({ code: 'open("/tmp/sbx-go", "w").close()\n"written"', context_id: d.id });
    assert.equal(other.main?.text, 'written', 'a busy context does not block another');
    assert.equal((await first).main?.text, 'True');
    assert.equal((await second).main?.text, "['first', 'second']", 'the second run waited for the first');
    await call('DELETE', `/contexts/${c.id}`);
    await call('DELETE', `/contexts/${d.id}`);
  });

  it('R runs in its own context (IRkernel)', async () => {
    const r = await run({ code: 'x <- c(1, 2, 3)\nprint(sum(x))\nmean(x)', language: 'r' });
    assert.ok(!r.error, JSON.stringify(r.error));
    assert.match(r.stdout, /\[1\] 6/);
    // IRkernel sends a visible value as display data (so, as with E2B, not the main result).
    assert.equal(r.results[0]?.text, '[1] 2');
    assert.equal(r.results[0]?.html, '2');
    const env = await run({ code: 'Sys.getenv("SBX_RUN_VAR")', language: 'r', env_vars: { SBX_RUN_VAR: 'r-run' } });
    assert.match(env.results[0]?.text ?? '', /r-run/);
    const after = await run({ code: 'Sys.getenv("SBX_RUN_VAR")', language: 'r' });
    assert.ok(after.results[0], 'a result');
    assert.doesNotMatch(after.results[0]?.text ?? '', /r-run/);
    const err = await run({ code: 'stop("boom")', language: 'r' });
    assert.match(err.error?.value ?? '', /boom/);
  });

  it('JavaScript, TypeScript and bash run through the JSON-lines kernels', async () => {
    const js = await run({ code: 'const a = 40; console.log("js"); a + 2', language: 'javascript' });
    assert.equal(js.stdout, 'js\n');
    assert.equal(js.main?.text, '42');
    assert.equal((await run({ code: 'a * 2', language: 'js' })).main?.text, '80', 'state kept in the default context');
    assert.equal((await run({ code: 'const b: number = 5; b', language: 'ts' })).main?.text, '5');
    const err = await run({ code: 'throw new Error("bad")', language: 'javascript' });
    assert.deepEqual([err.error?.name, err.error?.value], ['Error', 'bad']);
    const sh = await run({
      code: 'cd /tmp; echo "$SBX_RUN_VAR"; echo err >&2',
      language: 'bash',
      env_vars: { SBX_RUN_VAR: 'b' },
    });
    assert.deepEqual([sh.stdout, sh.stderr], ['b\n', 'err\n']);
    const again = await run({ code: 'pwd; printenv SBX_RUN_VAR || echo unset', language: 'bash' });
    assert.equal(again.stdout, '/tmp\nunset\n', 'cd persists, the per-run env var does not');
  });

  it('a kernel that dies is replaced: its run ends with KernelDied, the next run works', async () => {
    const c = JSON.parse((await call('POST', '/contexts', { language: 'python' })).text);
    const r = await run({ code: 'import os\nos.kill(os.getpid(), 9)', context_id: c.id });
    assert.equal(r.error?.name, 'KernelDied');
    assert.equal((await run({ code: '"alive"', context_id: c.id })).main?.text, 'alive');
    await call('DELETE', `/contexts/${c.id}`);
  });

  it('a server that dies is restarted by the supervisor; the default context keeps its id', async () => {
    const before = JSON.parse((await call('GET', '/contexts')).text) as { id: string; language: string }[];
    const py = before.find((c) => c.language === 'python');
    assert.ok(py);
    const pid = (await exec('cat /run/sandboxd-ci/server.pid')).stdout.trim();
    assert.match(pid, /^\d+$/);
    await exec(`kill -9 ${pid}`);
    // Bounded wait for the new server (and its default kernel).
    let back = false;
    for (let i = 0; i < 300 && !back; i++) {
      const p = (await exec('cat /run/sandboxd-ci/server.pid')).stdout.trim();
      back = p !== pid && (await healthy(200));
    }
    assert.ok(back, 'a new server answers /health');
    const after = JSON.parse((await call('GET', '/contexts')).text) as { id: string; language: string }[];
    assert.ok(
      after.some((c) => c.id === py.id && c.language === 'python'),
      'the default context is still there',
    );
    const r = await run({ code: 'print("after restart")' });
    assert.equal(r.stdout, 'after restart\n');
    const kernels = await exec("ps -eo user,args | grep -c '[i]pykernel_launcher' || true");
    assert.ok(Number(kernels.stdout.trim()) >= 1);
  });

  it('logs to /var/log/sandboxd-ci.log', async () => {
    const r = await exec('test -s /var/log/sandboxd-ci.log && grep -c "listening on" /var/log/sandboxd-ci.log');
    assert.equal(r.exitCode, 0);
    assert.ok(Number(r.stdout.trim()) >= 2, 'one line per server start');
  });
});
