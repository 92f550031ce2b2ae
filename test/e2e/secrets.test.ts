/**
 * Black-box, real runtime: secrets through the API, injected by the server's egress proxy
 * into requests to the fake internet (test/e2e/fake-internet.ts; its HTTPS on a CA of its
 * own, which the server is told to trust with SANDBOXD_EGRESS_CA_FILE). What reaches the
 * destination is read from the fake internet's log on the host. The value reaches the allowed
 * name over HTTP and HTTPS and nothing else: not another name, not the sandbox (env, files,
 * /proc, the memory of a process that sent it and read the reflected answer), not the API's
 * answers, not the server's logs. A new value reaches a running sandbox; the rules and the
 * secret survive a kill -9 of the server; deleting the secret stops injection at once; every
 * injection is in the audit trail.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type FakeInternet, NET, startFakeInternet } from './fake-internet.js';
import { newAccount, RUNTIME, type Server, startServer, until } from './harness.js';
import { localOptions, teardownLocal } from './local-runtime.js';

const DEBIAN = 'local/debian:bookworm';
const VALUE = 'sk-e2e-api-9f8e7d6c5b4a39281706';
const VALUE2 = 'sk-e2e-api-rotated-0a1b2c3d4e5f';

describe('secrets injected at the egress proxy (real runtime, through the API)', {
  skip: RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local',
  timeout: 600_000,
}, () => {
  let s: Server;
  let fi: FakeInternet;
  let env: Record<string, string>;
  let key: string;
  let id: string;
  let placeholder: string;

  const api = (method: string, path: string, body?: unknown) => s.api(method, path, { key, body });
  const exec = async (command: string) => {
    const r = await api('POST', `/api/v1/sandboxes/${id}/exec`, { command, options: { timeoutMs: 60_000 } });
    assert.equal(r.status, 200, r.text);
    for (const v of [VALUE, VALUE2]) assert.ok(!r.text.includes(v), `the sandbox saw a value: ${command}`);
    return r.body as { exitCode: number; stdout: string; stderr: string };
  };
  /** The fake internet's requests whose target holds `tag` (waits a little for its log line). */
  const seen = async (tag: string) =>
    until(
      `a request ${tag} at the fake internet`,
      async () => {
        const got = fi.log.filter((l) => l.http?.target?.includes(tag)).map((l) => l.http!);
        return got.length ? got : undefined;
      },
      10_000,
    );
  const curl = (url: string, tag: string, extra = '') =>
    `curl -sS --max-time 10 ${extra} -H "X-Key: $OPENAI" "${url}${url.includes('?') ? '&' : '?'}t=${tag}"`;

  before(async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'sandboxd-e2e-'));
    const o = localOptions(dataDir);
    fi = await startFakeInternet(Number(o.subnet!.split('.')[2]));
    env = {
      SANDBOXD_EGRESS_VIA: fi.via,
      SANDBOXD_EGRESS_DNS: NET.dns,
      SANDBOXD_EGRESS_CA_FILE: fi.caFile,
      // Debug logging: a value must not appear even there.
      SANDBOXD_LOG_LEVEL: 'debug',
    };
    s = await startServer({ dataDir, env }).catch(async (e) => {
      await teardownLocal(dataDir).catch(() => {});
      rmSync(dataDir, { recursive: true, force: true });
      await fi.close();
      throw e;
    });
    key = (await newAccount(s, { plan: 'PRO' })).key;
  });

  after(async () => {
    await s?.stop();
    await fi?.close();
  });

  it('refuses rules naming an unknown secret or a domain the egress does not allow, changing nothing', async () => {
    const made = await api('POST', '/api/v1/secrets', { name: 'OPENAI', value: VALUE, description: 'e2e' });
    assert.equal(made.status, 201, made.text);
    assert.ok(!made.text.includes(VALUE));
    const bad = await api('POST', '/api/v1/sandboxes', {
      image: DEBIAN,
      network: {
        egress: { allow: [NET.allowed.name] },
        secrets: [
          { secret: 'NOPE', domains: [NET.allowed.name] },
          { secret: 'OPENAI', domains: [NET.denied.name] },
        ],
      },
    });
    assert.equal(bad.status, 400, bad.text);
    const paths = (bad.body.details as { path: string }[]).map((d) => d.path).join(' ');
    assert.match(paths, /\/network\/secrets\/0/);
    assert.match(paths, /\/network\/secrets\/1\/domains\/0/);
    assert.equal((await api('GET', '/api/v1/sandboxes')).body.count, 0, 'no sandbox was made');
  });

  it('injects into requests to the allowed name only, over HTTP and HTTPS; the sandbox never holds the value', async () => {
    const c = await api('POST', '/api/v1/sandboxes', {
      image: DEBIAN,
      timeoutMs: 600_000,
      network: {
        egress: { allow: [NET.allowed.name, `*.${NET.wild.suffix}`] },
        secrets: [{ secret: 'OPENAI', domains: [NET.allowed.name], header: 'Authorization', format: 'Bearer {value}' }],
      },
    });
    assert.equal(c.status, 201, c.text);
    id = c.body.sandbox.id;
    const rule = c.body.sandbox.network.secrets[0];
    placeholder = rule.placeholder;
    assert.match(placeholder, /^sbx-secret-[0-9a-f]{24}$/);
    assert.ok(!c.text.includes(VALUE));

    const r = await exec(
      [
        curl('http://allowed.fake.test/echo', 'h1'),
        curl('https://allowed.fake.test/echo', 'h2'),
        // Another allowed name: relayed end to end, the placeholder untouched (its own certificate).
        curl('https://x.wild.fake.test/echo', 'w1', '-k'),
        curl('http://x.wild.fake.test/echo', 'w2'),
      ].join('; echo; '),
    );
    assert.equal(r.exitCode, 0, r.stderr);
    for (const tag of ['t=h1', 't=h2']) {
      const [h] = await seen(tag);
      assert.equal(h.headers?.authorization, `Bearer ${VALUE}`, tag);
      assert.equal(h.headers?.['x-key'], placeholder, `${tag}: a header rule sets its header only`);
    }
    for (const tag of ['t=w1', 't=w2']) {
      const [h] = await seen(tag);
      assert.equal(h.headers?.['x-key'], placeholder, tag);
      assert.equal(h.headers?.authorization, undefined, tag);
    }
    // The echo reflected the request: the sandbox got the placeholder back.
    assert.ok(r.stdout.includes(`Bearer ${placeholder}`), r.stdout);

    // Its environment and every process's: the placeholder only.
    const look = await exec(`env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'`);
    assert.ok(look.stdout.includes(`OPENAI=${placeholder}`), look.stdout);
    // No file of its root holds the value (a control file written first is found by the same walk).
    const files = await exec(
      `echo ctl-marker-77 > /tmp/ctl; grep -rIl --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -e '${VALUE}' -e ctl-marker-77 / 2>/dev/null | head -5; echo done`,
    );
    assert.equal(files.stdout, '/tmp/ctl\ndone\n');
  });

  it('a process that sent the placeholder and read the answer holds no value in its memory', async () => {
    // A shell keeps an HTTP/1.1 connection open, sends a request with the placeholder, reads
    // the reflected answer into a variable, and stays alive; then its whole writable memory is
    // read through /proc/<pid>/mem and searched (a control string it holds is found).
    const start = await exec(
      [
        'cat > /tmp/hold.sh <<"EOF"',
        'exec 3<>/dev/tcp/allowed.fake.test/80',
        'printf "GET /echo?t=mem HTTP/1.1\\r\\nHost: allowed.fake.test\\r\\nX-Key: %s\\r\\nConnection: close\\r\\n\\r\\n" "$OPENAI" >&3',
        'ANSWER=$(cat <&3)',
        'CONTROL=ctl-mem-$((6*7))-marker',
        'echo "$ANSWER" > /tmp/answer',
        'echo ready > /tmp/hold.ready',
        'sleep 300',
        'EOF',
        'nohup bash /tmp/hold.sh > /dev/null 2>&1 &',
        'echo $!',
      ].join('\n'),
    );
    const pid = start.stdout.trim();
    assert.match(pid, /^\d+$/, start.stderr);
    await until('the holder to read its answer', async () => {
      const r = await exec('cat /tmp/hold.ready 2>/dev/null');
      return r.stdout.includes('ready') ? true : undefined;
    });
    const [h] = await seen('t=mem');
    assert.equal(h.headers?.authorization, `Bearer ${VALUE}`, 'the request from the holder was injected');
    const answer = await exec('cat /tmp/answer');
    assert.ok(answer.stdout.includes(placeholder), answer.stdout);
    // bash: /bin/sh (dash) has no base-16 arithmetic.
    const dump = await exec(
      [
        'cat > /tmp/dump.sh <<"EOF"',
        'pid=$1',
        'while read -r range perms rest; do',
        '  case "$perms" in r*) ;; *) continue ;; esac',
        // biome-ignore lint/suspicious/noTemplateCurlyInString: shell parameter expansion
        '  a=$((16#${range%-*})); b=$((16#${range#*-}))',
        '  dd if=/proc/$pid/mem bs=4096 skip=$((a/4096)) count=$(((b-a)/4096)) 2>/dev/null',
        'done < /proc/$pid/maps',
        'EOF',
        `bash /tmp/dump.sh ${pid} > /tmp/mem.bin; echo "$(grep -c -a -e '${VALUE}' /tmp/mem.bin) $(grep -c -a -e ctl-mem-42-marker /tmp/mem.bin) $(wc -c < /tmp/mem.bin)"; rm -f /tmp/mem.bin`,
      ].join('\n'),
    );
    const [withValue, withControl, bytes] = dump.stdout.trim().split(' ').map(Number);
    assert.ok(withControl > 0 && bytes > 100_000, `the dump holds the control string: ${dump.stdout} ${dump.stderr}`);
    assert.equal(withValue, 0, 'the value is in the memory of the sandbox process');
    await exec(`kill ${pid}`);
  });

  it('a new value reaches the running sandbox before the answer; the audit trail lists the injections', async () => {
    const put = await api('PUT', '/api/v1/secrets/OPENAI', { value: VALUE2 });
    assert.equal(put.status, 200, put.text);
    assert.equal(put.body.secret.version, 2);
    await exec(curl('https://allowed.fake.test/echo', 'v2'));
    const [h] = await seen('t=v2');
    assert.equal(h.headers?.authorization, `Bearer ${VALUE2}`);
    const audit = await until('the audit rows', async () => {
      const a = await api('GET', `/api/v1/secrets/injections?sandboxId=${id}`);
      assert.equal(a.status, 200, a.text);
      return a.body.injections.length >= 4 ? a.body.injections : undefined;
    });
    for (const e of audit) {
      assert.equal(e.sandboxId, id);
      assert.equal(e.secret, 'OPENAI');
      assert.match(e.destination, /^allowed\.fake\.test:(80|443)$/);
    }
    assert.ok(audit.some((e: { status: number }) => e.status === 200));
    const list = await api('GET', '/api/v1/secrets');
    assert.deepEqual(
      list.body.secrets.map((x: { name: string; version: number }) => [x.name, x.version]),
      [['OPENAI', 2]],
    );
    const got = await api('GET', `/api/v1/sandboxes/${id}`);
    for (const t of [list.text, got.text, JSON.stringify(audit)]) {
      assert.ok(!t.includes(VALUE) && !t.includes(VALUE2), 'an answer carried a value');
    }
  });

  it('rules added by PATCH to a running sandbox: its later commands get the placeholder and trust the CA', async () => {
    const c = await api('POST', '/api/v1/sandboxes', {
      image: DEBIAN,
      network: { egress: { allow: [NET.allowed.name] } },
    });
    assert.equal(c.status, 201, c.text);
    const other = c.body.sandbox.id;
    const p = await api('PATCH', `/api/v1/sandboxes/${other}/network`, {
      egress: { allow: [NET.allowed.name] },
      secrets: [{ secret: 'OPENAI', domains: [NET.allowed.name], header: 'X-Api-Key' }],
    });
    assert.equal(p.status, 200, p.text);
    const ph = p.body.network.secrets[0].placeholder;
    assert.match(ph, /^sbx-secret-/);
    const r = await api('POST', `/api/v1/sandboxes/${other}/exec`, {
      command: `echo "$OPENAI"; curl -sS --max-time 10 "https://allowed.fake.test/echo?t=patched"`,
      options: { timeoutMs: 60_000 },
    });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.exitCode, 0, r.body.stderr);
    assert.equal(r.body.stdout.split('\n')[0], ph);
    assert.ok(!r.text.includes(VALUE2));
    const [h] = await seen('t=patched');
    assert.equal(h.headers?.['x-api-key'], VALUE2);
    // Removed, then named again: later commands hold the placeholder the answer shows.
    const off = await api('PATCH', `/api/v1/sandboxes/${other}/network`, {
      egress: { allow: [NET.allowed.name] },
      secrets: [],
    });
    assert.equal(off.status, 200, off.text);
    const again = await api('PATCH', `/api/v1/sandboxes/${other}/network`, {
      egress: { allow: [NET.allowed.name] },
      secrets: [{ secret: 'OPENAI', domains: [NET.allowed.name], header: 'X-Api-Key' }],
    });
    assert.equal(again.status, 200, again.text);
    const r2 = await api('POST', `/api/v1/sandboxes/${other}/exec`, {
      command: `echo "$OPENAI"; curl -sS --max-time 10 -H "X-Other: $OPENAI" "https://allowed.fake.test/echo?t=again"`,
      options: { timeoutMs: 60_000 },
    });
    assert.equal(r2.body.exitCode, 0, r2.body.stderr);
    assert.equal(r2.body.stdout.split('\n')[0], again.body.network.secrets[0].placeholder);
    const [h2] = await seen('t=again');
    // (A header rule sets its header only: the placeholder in another header stays.)
    assert.deepEqual(
      [h2.headers?.['x-api-key'], h2.headers?.['x-other']],
      [VALUE2, again.body.network.secrets[0].placeholder],
    );
    assert.equal((await api('DELETE', `/api/v1/sandboxes/${other}`)).status, 204);
  });

  it('survives a kill -9 of the server; deleting the secret stops injection at once', async () => {
    await s.kill('SIGKILL');
    s = await startServer({ dataDir: s.dataDir, port: s.port, env });
    assert.equal((await api('GET', '/api/v1/secrets/OPENAI')).status, 200);
    await exec(curl('https://allowed.fake.test/echo', 'k9'));
    const [h] = await seen('t=k9');
    assert.equal(h.headers?.authorization, `Bearer ${VALUE2}`, 'injection resumed on the adopted sandbox');

    assert.equal((await api('DELETE', '/api/v1/secrets/OPENAI')).status, 204);
    await exec(curl('https://allowed.fake.test/echo', 'gone'));
    const [g] = await seen('t=gone');
    assert.equal(g.headers?.authorization, undefined, 'nothing injected once deleted');
    assert.equal(g.headers?.['x-key'], placeholder);
  });

  it('no value in the server logs, at debug level', async () => {
    const logs = readdirSync(s.dataDir).filter((f) => f.endsWith('.log'));
    assert.ok(logs.length >= 2, `the server logs: ${logs}`);
    for (const f of logs) {
      const text = readFileSync(join(s.dataDir, f), 'utf8');
      assert.ok(!text.includes(VALUE) && !text.includes(VALUE2), `${f} holds a value`);
    }
    assert.ok(!s.stdout().includes(VALUE) && !s.stdout().includes(VALUE2), 'stdout holds a value');
  });
});
