/**
 * Real runtime, driver level: secret injection at the local driver's egress proxy, against
 * the fake internet (its HTTPS on a CA of its own, which the driver is told to trust with
 * `egressCaFile`). A sandbox holding only a placeholder curls the fake internet's echo over
 * HTTP and HTTPS: the value arrives there (read from the fake internet's log, on the host),
 * never in what the sandbox gets back, its env or its files; requests to other names keep
 * the placeholder; the CA's key is out of its reach; rules set later install the CA; the
 * rules (values sealed on disk) survive a new driver process; a rule without value stops
 * injecting at once.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { SandboxSpec, SecretInjection } from '../../packages/server/src/runtime/driver.js';
import { LocalDriver, type LocalDriverOptions } from '../../packages/server/src/runtime/local/driver.js';
import { type FakeInternet, NET, startFakeInternet } from './fake-internet.js';
import { RUNTIME } from './harness.js';
import { localOptions, releaseSlot } from './local-runtime.js';

const DEBIAN = 'local/debian:bookworm';
const VALUE = 'sk-live-e2e-0123456789abcdef';
const PH = 'sbx-secret-0123456789abcdef01234567';
/** The warm pool's default shape: a create with it is a claim. */
const LIMITS = { memoryBytes: 512 << 20, cpus: 1, pids: 512, rootDiskBytes: 1 << 30 };

describe('secret injection at the egress proxy (local driver)', {
  skip: RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local',
  timeout: 300_000,
}, () => {
  let fi: FakeInternet;
  let driver: LocalDriver;
  let opts: LocalDriverOptions;
  let dataDir: string;
  let seq = 0;
  const rule = (over: Partial<SecretInjection> = {}): SecretInjection => ({
    secret: 'API',
    domains: [NET.allowed.name],
    header: 'Authorization',
    format: 'Bearer {value}',
    placeholder: PH,
    value: VALUE,
    ...over,
  });
  const spec = (over: Partial<SandboxSpec> = {}): SandboxSpec => ({
    id: `sp_${process.pid}_${seq++}`,
    image: DEBIAN,
    env: { API: PH },
    volumes: [],
    limits: LIMITS,
    egress: 'internet',
    ...over,
  });
  const sh = async (id: string, cmd: string) => {
    const r = await driver.exec(id, cmd, { timeoutMs: 60_000 });
    assert.ok(!r.stdout.includes(VALUE) && !r.stderr.includes(VALUE), `the sandbox saw the value: ${cmd}`);
    return r;
  };
  /** The fake internet's log entries for `/echo` targets with `tag` in them. */
  const echoed = (tag: string) => fi.log.filter((l) => l.http?.target?.includes(tag)).map((l) => l.http!);
  const waitEchoed = async (tag: string) => {
    for (let i = 0; i < 100 && echoed(tag).length === 0; i++) await new Promise((r) => setTimeout(r, 20));
    return echoed(tag);
  };

  before(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'sandboxd-e2e-'));
    chmodSync(dataDir, 0o711); // the sandboxes' uids traverse it
    const o = localOptions(dataDir);
    fi = await startFakeInternet(Number(o.subnet!.split('.')[2]));
    opts = {
      ...o,
      egressVia: fi.via,
      egressDns: [{ host: NET.dns, port: 53 }],
      egressCaFile: fi.caFile,
      // The first create is a claim from the warm pool (started with `none` and no rules).
      warmPool: [{ image: DEBIAN, size: 1 }],
    };
    driver = new LocalDriver(opts);
    await driver.init();
    await driver.recover();
  });

  after(async () => {
    await driver?.destroyAll();
    await fi?.close();
    if (dataDir) {
      releaseSlot(dataDir);
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('injects over HTTP and HTTPS at the allowed name only; the sandbox never holds the value', async () => {
    const events: unknown[] = [];
    const off = driver.onInjection((e) => events.push(e));
    await driver.refillPools();
    assert.equal(driver.warmPool()[DEBIAN], 1);
    const s = spec({ secrets: [rule()] });
    await driver.create(s);
    const cid = (driver as unknown as { records: Map<string, { cid: string }> }).records.get(s.id)?.cid;
    assert.notEqual(cid, s.id, 'claimed from the warm pool');
    const ca = readFileSync(join(dataDir, 'egress-ca', 'ca.crt'), 'utf8');
    // Trust: the CA file, appended to the system bundle, and the variables.
    const trust = await sh(s.id, 'cat /etc/sandboxd/ca.crt; echo "$SSL_CERT_FILE $NODE_EXTRA_CA_CERTS"');
    assert.ok(trust.stdout.startsWith(ca));
    assert.match(trust.stdout, /\/etc\/ssl\/certs\/ca-certificates.crt \/etc\/sandboxd\/ca.crt\n$/);
    const r = await sh(
      s.id,
      [
        'curl -sS --max-time 10 "http://allowed.fake.test/echo?t=h1&k=$API"',
        'echo',
        'curl -sS --max-time 10 -H "X-Key: $API" "https://allowed.fake.test/echo?t=h2"',
        'echo',
        // Another name: relayed untouched, the placeholder stays (its own certificate: -k).
        'curl -sS --max-time 10 -H "X-Key: $API" "http://denied.fake.test/echo?t=h3"',
        'echo',
        'curl -sSk --max-time 10 -H "X-Key: $API" "https://denied.fake.test/echo?t=h4"',
        'echo',
        // DNS tricks: the allowed name pinned to the denied server's address; the proxy
        // dials the address the name resolves to through sandboxd, never the dialled one.
        `curl -sS --max-time 10 --resolve allowed.fake.test:443:${NET.denied.ip} "https://allowed.fake.test/echo?t=pinned"`,
        'echo',
        // A redirect from the injected name to another: followed by the sandbox, with the placeholder.
        `curl -sSL --max-time 10 -H "X-Key: $API" "http://allowed.fake.test/redirect?to=${encodeURIComponent('http://denied.fake.test/echo?t=redirected')}"`,
        'echo',
        // `internet` with rules: other ports still go straight out.
        'curl -sS --max-time 10 "http://denied.fake.test:8080/"',
      ].join('; '),
    );
    assert.equal(r.exitCode, 0, r.stderr);
    const [h1] = await waitEchoed('t=h1');
    // A header rule sets its header only: the placeholder elsewhere in the head stays.
    assert.equal(h1.target, `/echo?t=h1&k=${PH}`);
    assert.equal(h1.headers?.authorization, `Bearer ${VALUE}`);
    const [h2] = await waitEchoed('t=h2');
    assert.equal(h2.port, 443);
    assert.equal(h2.headers?.['x-key'], PH);
    assert.equal(h2.headers?.authorization, `Bearer ${VALUE}`);
    for (const t of ['t=h3', 't=h4']) {
      const [h] = await waitEchoed(t);
      assert.equal(h.headers?.['x-key'], PH, t);
      assert.equal(h.headers?.authorization, undefined, t);
    }
    const [pinned] = await waitEchoed('t=pinned');
    assert.equal(pinned.ip, NET.allowed.ip, 'the proxy dialled the name, not the pinned address');
    assert.ok(!fi.log.some((l) => l.http?.ip === NET.denied.ip && JSON.stringify(l).includes(VALUE)));
    const [redirected] = await waitEchoed('t=redirected');
    assert.equal(redirected.ip, NET.denied.ip);
    assert.equal(redirected.headers?.['x-key'], PH, 'the redirect carried the placeholder');
    // What came back reflected the request: with the placeholder where the value was.
    assert.ok(r.stdout.includes(`Bearer ${PH}`), r.stdout);
    assert.match(r.stdout, /"port":8080/);
    // Env, files, processes' environments: no value.
    const look = await sh(s.id, `env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'`);
    assert.ok(look.stdout.includes(`API=${PH}`));
    // No file of its root holds the value; the control file (a marker in /tmp) is found by
    // the same walk of the whole root.
    const files = await sh(
      s.id,
      `echo ctl-marker-42 > /tmp/ctl; grep -rIl --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -e '${VALUE}' -e ctl-marker-42 / 2>/dev/null | head -5; echo done`,
    );
    assert.equal(files.stdout, '/tmp/ctl\ndone\n');
    // The CA's key is not in the sandbox, nor reachable by its host path.
    const key = await sh(s.id, `test -e ${join(dataDir, 'egress-ca', 'ca.key')} && echo reachable; ls /etc/sandboxd`);
    assert.equal(key.stdout, 'ca.crt\n');
    // On the host, the record holds no value in clear.
    let inClear = '';
    try {
      inClear = execFileSync('grep', ['-rl', VALUE, join(dataDir, 'sandboxes')], { encoding: 'utf8' });
    } catch {
      // grep found nothing (exit 1)
    }
    assert.equal(inClear, '');
    off();
    assert.ok(events.length >= 2, `${events.length} events`);
    assert.deepEqual(
      (events as { destination: string; sandboxId: string; secret: string; status: number }[])
        .map((e) => [e.sandboxId, e.secret, e.destination, e.status])
        .slice(0, 2),
      [
        [s.id, 'API', 'allowed.fake.test:80', 200],
        [s.id, 'API', 'allowed.fake.test:443', 200],
      ],
    );
    await driver.delete(s.id);
  });

  it("another sandbox's placeholder gets nothing; the keys on the host are 0600", async () => {
    // A holds PH for API; B has a rule of its own (another secret, no header) for the same name,
    // and sends A's placeholder there in the target and a header.
    const PH_B = 'sbx-secret-bbbbbbbbbbbbbbbbbbbbbbbb';
    const a = spec({ secrets: [rule()] });
    const b = spec({
      env: { B: PH_B },
      secrets: [rule({ secret: 'B', header: undefined, placeholder: PH_B, value: 'b-value-e2e-42' })],
    });
    await driver.create(a);
    await driver.create(b);
    const r = await sh(
      b.id,
      `curl -sS --max-time 10 -H "X-Key: ${PH}" -H "X-Own: $B" "https://allowed.fake.test/echo?t=neighbour&k=${PH}"`,
    );
    assert.equal(r.exitCode, 0, r.stderr);
    const [h] = await waitEchoed('t=neighbour');
    assert.equal(h.target, `/echo?t=neighbour&k=${PH}`);
    assert.equal(h.headers?.['x-key'], PH);
    assert.equal(h.headers?.authorization, undefined);
    assert.equal(h.headers?.['x-own'], 'b-value-e2e-42', "B's own rule injects");
    for (const f of [join(dataDir, 'egress-ca', 'ca.key'), join(dataDir, 'runtime-secrets.key')]) {
      assert.equal(statSync(f).mode & 0o777, 0o600, f);
    }
    await driver.delete(a.id);
    await driver.delete(b.id);
  });

  it('rules set later install the CA; a new driver process keeps injecting; a rule without value stops', async () => {
    const s = spec({ egress: { allow: [NET.allowed.name] } });
    await driver.create(s);
    assert.notEqual((await sh(s.id, 'test -e /etc/sandboxd/ca.crt; echo $?')).stdout, '0\n');
    await driver.setSecrets(s.id, [rule()]);
    const a = await sh(s.id, 'curl -sS --max-time 10 "https://allowed.fake.test/echo?t=later"');
    assert.equal(a.exitCode, 0, a.stderr);
    assert.equal((await waitEchoed('t=later'))[0].headers?.authorization, `Bearer ${VALUE}`);
    // A new driver on the same data dir (as after a kill -9 of the server) adopts the sandbox.
    await driver.close();
    driver = new LocalDriver(opts);
    await driver.init();
    await driver.recover();
    const b = await sh(s.id, 'curl -sS --max-time 10 "https://allowed.fake.test/echo?t=adopted"');
    assert.equal(b.exitCode, 0, b.stderr);
    assert.equal((await waitEchoed('t=adopted'))[0].headers?.authorization, `Bearer ${VALUE}`);
    // The secret deleted: the rule stays without value, nothing is injected.
    await driver.setSecrets(s.id, [rule({ value: undefined })]);
    const c = await sh(s.id, 'curl -sS --max-time 10 -H "Authorization: $API" "https://allowed.fake.test/echo?t=gone"');
    assert.equal(c.exitCode, 0, c.stderr);
    assert.equal((await waitEchoed('t=gone'))[0].headers?.authorization, PH);
    await driver.delete(s.id);
  });
});
