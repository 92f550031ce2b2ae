/**
 * Black-box, real runtime: hostile builds. A RUN step tries the host's services (the API's
 * port and a canary listener on every host address, the bridge gateway, metadata) and the
 * host's files (a canary file, the server's data dir, the image store): nothing is reached,
 * with and without an allow list. A build of one account cannot start from another's
 * template, by name or by its layer ref (`snapshot/...`), in FROM or `COPY --from`; nor can a
 * create; the other account neither sees, builds from, creates from nor deletes it, nor
 * reaches its builds. Context symlinks pointing outside (`../../etc/passwd`, absolute, to a
 * host canary) resolve inside the context; a tar with `../` or absolute entries is refused.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server as NetServer } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { newAccount, RUNTIME, type Server, startServer, until } from './harness.js';
import { TEST_IMAGE_DIR } from './local-runtime.js';
import { BUSYBOX, Builds, context, DEBIAN, layerRefs, stopClean, tar, withDockerfile } from './builds-support.js';

/** Connects to each target from inside a step; prints `PROBE <json>` of `[host, port, outcome]`. */
const PROBE = `
import json, socket, struct, sys
def gateway():
    for l in open('/proc/net/route').read().splitlines()[1:]:
        f = l.split()
        if f[1] == '00000000':
            return socket.inet_ntoa(struct.pack('<L', int(f[2], 16)))
gw = gateway()
out = []
for host, port in json.loads(sys.argv[1]):
    host = gw if host == 'GW' else host
    if host is None:
        out.append([host, port, 'no-gateway']); continue
    s = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET)
    s.settimeout(1.5)
    try:
        s.connect((host, port))
        # Something answered: what? sandboxd's egress proxy (80/443 under allow rules) refuses
        # a name outside the rules with its own 403 (HTTP) or a handshake_failure alert (TLS).
        s.sendall(b'GET / HTTP/1.0\\r\\nHost: ' + host.encode() + b'\\r\\n\\r\\n')
        data = b''
        try:
            while len(data) < 400:
                b = s.recv(400)
                if not b: break
                data += b
        except OSError:
            pass
        if data.startswith(b'HTTP/1.1 403 Forbidden') and b'sandboxd egress:' in data:
            r = 'egress-proxy-refused'
        elif data.startswith(bytes([0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x28])):
            r = 'egress-proxy-refused-tls'
        else:
            r = 'connected:' + repr(data[:80])
    except socket.timeout:
        r = 'timeout'
    except OSError as e:
        r = 'errno-%d' % e.errno
    s.close()
    out.append([host, port, r])
print('PROBE ' + json.dumps(out))
`;

describe('hostile image builds (real runtime)', {
  skip: RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local',
  timeout: 900_000,
}, () => {
  let s: Server;
  let a: Builds;
  let other: Builds;
  let aId: string;
  let canary: NetServer;
  let canaryPort = 0;
  const canarySeen: string[] = [];
  const hostDir = mkdtempSync(join(tmpdir(), 'sbx-build-canary-'));
  const secret = `host-secret-${randomBytes(12).toString('hex')}`;
  const canaryFile = join(hostDir, `canary-${randomBytes(6).toString('hex')}.txt`);
  writeFileSync(canaryFile, `${secret}\n`);

  before(async () => {
    canary = createServer((c) => {
      canarySeen.push(String(c.remoteAddress));
      c.destroy();
    });
    await new Promise<void>((r) => canary.listen(0, '0.0.0.0', r));
    canaryPort = (canary.address() as { port: number }).port;
    s = await startServer();
    const x = await newAccount(s, { tokens: 1_000_000, plan: 'PRO' });
    a = new Builds(s, x.key);
    aId = x.id;
    other = new Builds(s, (await newAccount(s, { tokens: 1_000_000, plan: 'PRO' })).key);
  });
  after(async () => {
    await stopClean(s, [a, other]);
    await new Promise((r) => canary?.close(r));
    rmSync(hostDir, { recursive: true, force: true });
  });

  /** Host addresses a step might try (IPv4 and IPv6, loopback excluded). */
  const hostAddresses = () =>
    Object.values(networkInterfaces())
      .flat()
      .filter((i) => i && !i.internal && !i.address.startsWith('fe80:'))
      .map((i) => i!.address);

  it("RUN cannot reach the host (its API, a canary on every address, the gateway, metadata), another account's sandbox, nor host files", async () => {
    // A neighbour: another account's sandbox serving on port 8000, which the host reaches (control).
    const neighbour = await other.sandbox(DEBIAN);
    await s.api('POST', `/api/v1/sandboxes/${neighbour}/exec`, {
      key: other.key,
      body: { command: 'python3 -m http.server 8000 >/dev/null 2>&1', options: { background: true } },
    });
    const addr = (await other.sh(neighbour, 'hostname -I')).stdout.trim().split(/\s+/)[0];
    assert.match(addr, /^\d+\.\d+\.\d+\.\d+$/, `neighbour address: ${addr}`);
    const served = await until('the neighbour to serve (from the host)', async () =>
      fetch(`http://${addr}:8000/`, { signal: AbortSignal.timeout(2000) }).then(
        (r) => (r.status === 200 ? true : undefined),
        () => undefined,
      ),
    );
    assert.ok(served);
    const targets: Array<[string, number]> = [];
    for (const port of [s.port, canaryPort, 22, 80, 443, 8080]) targets.push(['GW', port]);
    for (const h of hostAddresses()) for (const port of [s.port, canaryPort]) targets.push([h, port]);
    targets.push(['169.254.169.254', 80], [addr, 8000]);
    const df = [
      `FROM ${DEBIAN}`,
      'COPY probe.py /probe.py',
      `RUN python3 /probe.py '${JSON.stringify(targets)}'`,
      `RUN cat ${canaryFile} 2>&1; ls ${s.dataDir} 2>&1; ls ${TEST_IMAGE_DIR}/by-digest 2>&1; ls /proc/1/root${hostDir} 2>&1; ` +
        `find / -xdev -name '${canaryFile.split('/').pop()}' 2>/dev/null; grep -rlF "$(printf %s%s ${secret.slice(0, 16)} ${secret.slice(16)})" /tmp /root /run /var /home 2>/dev/null; echo files-tried`,
      '',
    ].join('\n');
    for (const allowDomains of [undefined, ['example.com']]) {
      const build = await a.run(
        { name: 'probe', tag: allowDomains ? 'allow' : 'none', allowDomains, noCache: true },
        withDockerfile(df, { 'probe.py': PROBE }),
      );
      const log = await a.logText(build.id);
      assert.equal(build.state, 'ready', `${JSON.stringify(build.error)}\n${log}`);
      const line = log.split('\n').find((l) => l.startsWith('PROBE '));
      assert.ok(line, log);
      const results = JSON.parse(line.slice(6)) as Array<[string, number, string]>;
      assert.equal(results.length, targets.length);
      const reached = results.filter(([, , r]) => r.startsWith('connected'));
      console.log(
        `# ${results.length} targets (allow ${allowDomains ?? 'none'}): ${[...new Set(results.map((r) => r[2]))]}`,
      );
      assert.deepEqual(reached, [], 'a step reached the host');
      assert.match(log, /files-tried/);
      assert.doesNotMatch(log, new RegExp(secret), 'a step read the host canary');
      assert.doesNotMatch(log, /sandboxd\.db|by-digest\/[0-9a-f]{64}/, 'a step listed host dirs');
    }
    assert.deepEqual(canarySeen, [], 'the host canary saw a connection');
    await other.deleteSandbox(neighbour);
  });

  it("another account's template: neither listed, built from (by name or layer ref), created from, nor deleted", async () => {
    const mine = await a.run(
      { name: 'private', tag: 'v1' },
      withDockerfile(`FROM ${BUSYBOX}\nRUN echo a-only > /owner\n`),
    );
    assert.equal(mine.state, 'ready', JSON.stringify(mine.error));
    const layers = layerRefs(s.dataDir, aId);
    assert.ok(layers.length > 0, 'A has layer images');
    const layer = layers[0];

    assert.ok(!(await other.templates()).some((t) => t.name === 'private'), 'not listed to B');
    const refused = [
      'FROM templates/private:v1\n',
      'FROM templates/private\n',
      `FROM ${layer}\n`,
      `FROM ${layer.replace(/^snapshot\//, 'snapshots/')}\n`,
      `FROM ${BUSYBOX}\nCOPY --from=templates/private:v1 /owner /owner\n`,
      `FROM ${BUSYBOX}\nCOPY --from=${layer} /owner /owner\n`,
      `FROM templates/private:v1 AS x\nFROM ${BUSYBOX}\nCOPY --from=x /owner /owner\n`,
    ];
    for (const df of refused) {
      const r = await other.start({ name: 'steal' }, withDockerfile(df));
      assert.ok([400, 404].includes(r.status), `${df}: ${r.status} ${r.text}`);
      assert.match(r.body.kind, /validation|template_not_found/);
    }
    for (const image of ['templates/private:v1', 'templates/private', layer]) {
      const r = await s.api('POST', '/api/v1/sandboxes', { key: other.key, body: { image } });
      assert.ok([400, 404].includes(r.status), `${image}: ${r.text}`);
    }
    // A cannot name its own layer either: the runtime's namespace is not an image a create or FROM takes.
    const own = await s.api('POST', '/api/v1/sandboxes', { key: a.key, body: { image: layer } });
    assert.ok([400, 404].includes(own.status), own.text);
    const ownFrom = await a.start({ name: 'own-layer' }, withDockerfile(`FROM ${layer}\n`));
    assert.ok([400, 404].includes(ownFrom.status), ownFrom.text);

    const del = await other.deleteTemplate('private', 'v1');
    assert.equal(del.status, 404, del.text);
    assert.equal((await other.deleteTemplate('private')).status, 404);
    for (const r of [
      await other.get(mine.id),
      await other.cancel(mine.id),
      await other.delete(mine.id),
      { status: (await other.openLogs(mine.id)).status },
    ])
      assert.equal(r.status, 404);
    // B's own template of the same name is its own; A's is unchanged.
    const theirs = await other.run(
      { name: 'private', tag: 'v1' },
      withDockerfile(`FROM ${BUSYBOX}\nRUN echo b-only > /owner\n`),
    );
    assert.equal(theirs.state, 'ready', JSON.stringify(theirs.error));
    for (const [who, want] of [
      [a, 'a-only\n'],
      [other, 'b-only\n'],
    ] as const) {
      const id = await who.sandbox('templates/private:v1');
      assert.equal((await who.sh(id, 'cat /owner')).stdout, want);
      await who.deleteSandbox(id);
    }
    assert.equal((await a.get(mine.id)).status, 200, "A's build is still there");
    assert.ok((await a.templates()).some((t) => t.name === 'private' && t.buildId === mine.id));
  });

  it('context symlinks pointing outside resolve inside the context; tars with ../ or absolute entries are refused', async () => {
    const ctx = context({
      Dockerfile: [
        `FROM ${BUSYBOX}`,
        'COPY evil-abs /got/abs',
        'COPY evil-rel /got/rel',
        'COPY evil-dir/etc/passwd /got/through-dir',
        'COPY tree/ /got/tree/',
        '',
      ].join('\n'),
      'etc/passwd': 'context-passwd\n',
      'evil-abs': { type: 'symlink', link: '/etc/passwd' },
      'evil-rel': { type: 'symlink', link: '../../etc/passwd' },
      'evil-dir': { type: 'symlink', link: '/' },
      'tree/file.txt': 'in tree\n',
      'tree/inner-link': { type: 'symlink', link: '../../../../etc/shadow' },
      'tree/host-canary': { type: 'symlink', link: canaryFile },
    });
    const build = await a.run({ name: 'links' }, ctx);
    assert.equal(build.state, 'ready', `${JSON.stringify(build.error)}\n${await a.logText(build.id)}`);
    const id = await a.sandbox('templates/links');
    const r = await a.sh(
      id,
      'cat /got/abs /got/rel /got/through-dir; readlink /got/tree/inner-link; readlink /got/tree/host-canary; cat /got/tree/file.txt; test -L /got/tree/inner-link && echo is-link',
    );
    assert.equal(
      r.stdout,
      `context-passwd\ncontext-passwd\ncontext-passwd\n../../../../etc/shadow\n${canaryFile}\nin tree\nis-link\n`,
      r.stderr,
    );
    assert.doesNotMatch(r.stdout + r.stderr, new RegExp(secret));
    await a.deleteSandbox(id);

    // A symlink to a host file: the context has no such file, so nothing is copied (never the host's).
    const toHost = await a.start(
      { name: 'links', tag: 'host' },
      context({
        Dockerfile: `FROM ${BUSYBOX}\nCOPY canary /got/canary\n`,
        canary: { type: 'symlink', link: canaryFile },
      }),
    );
    if (toHost.status === 202) {
      const done = await a.wait(toHost.body.build.id);
      assert.equal(done.state, 'error', 'a link out of the context is not followed');
      assert.doesNotMatch(JSON.stringify(done.error) + (await a.logText(done.id)), new RegExp(secret));
    } else {
      assert.equal(toHost.status, 400, toHost.text);
      assert.doesNotMatch(toHost.text, new RegExp(secret));
    }

    const dockerfile = { name: 'Dockerfile', data: `FROM ${BUSYBOX}\nCOPY . /x/\n` };
    const bad: Array<[string, Buffer]> = [
      ['../ entry', tar([dockerfile, { name: '../escape.txt', data: 'x' }])],
      ['nested ../ entry', tar([dockerfile, { name: 'a/../../escape.txt', data: 'x' }])],
      ['absolute entry', tar([dockerfile, { name: '/etc/cron.d/evil', data: 'x' }])],
      ['hard link out', tar([dockerfile, { name: 'h', type: 'hardlink', link: '../../etc/passwd' }])],
      ['long ../ name (pax)', tar([dockerfile, { name: `${'../'.repeat(40)}etc/passwd`, data: 'x' }])],
    ];
    const before = (await a.list()).length;
    for (const [what, body] of bad) {
      const r = await a.start({ name: 'tarbad' }, body);
      assert.equal(r.status, 400, `${what}: ${r.text}`);
      assert.equal(r.body.kind, 'validation');
    }
    assert.equal((await a.list()).length, before, 'no build was made');
    assert.deepEqual(await a.stepSandboxes(), []);
  });
});
