/**
 * Secret injection at the egress proxy: the same request from inside a sandbox, in one run,
 * taking turns, against the fake internet's echo (test/e2e/fake-internet.ts; no packet
 * leaves the machine):
 * - `injected`: egress `allow` + an injection rule for the name: the proxy terminates the
 *   connection (TLS with its CA's leaf), puts the value in, and opens its own (verified)
 *   connection upstream per request;
 * - `relayed`: egress `allow`, no rule: the proxy checks Host / SNI and relays the bytes;
 * - `bare`: egress `internet`, no rule: straight out.
 * Cases: HTTP and HTTPS on a new connection (lookup + connect + TLS + request + whole
 * answer), and a request on an HTTPS connection kept alive (the second of two).
 * BENCH_SECRETS_RUNS rounds (default 40) after 5 warm-up rounds.
 */
import { rmSync } from 'node:fs';
import { makeTestDriver } from '../packages/server/test/local-driver.js';
import { NET, startFakeInternet, uplinkDev, watchUplink } from '../test/e2e/fake-internet.js';
import { report, summarize } from './stats.js';

const RUNS = Number(process.env.BENCH_SECRETS_RUNS ?? 40);
const WARMUP = 5;
const IMAGE = 'local/debian:bookworm';
const LIMITS = { memoryBytes: 512 << 20, cpus: 1, pids: 256, rootDiskBytes: 1 << 30 };
const PH = 'sbx-secret-0000000000000000000000be';

const ROUND_PY = `
import http.client, json, ssl, sys, time
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
name = sys.argv[1]
out = {}
def one(conn):
    conn.request('GET', '/echo', headers={'X-Key': sys.argv[2]})
    r = conn.getresponse()
    r.read()
    if r.status != 200: raise SystemExit('status %d' % r.status)
t = time.perf_counter(); c = http.client.HTTPConnection(name, 80, timeout=5); one(c); c.close()
out['http, new connection'] = (time.perf_counter() - t) * 1000
t = time.perf_counter(); c = http.client.HTTPSConnection(name, 443, timeout=5, context=ctx); one(c)
out['https, new connection'] = (time.perf_counter() - t) * 1000
t = time.perf_counter(); one(c)
out['https, kept-alive request'] = (time.perf_counter() - t) * 1000
c.close()
print(json.dumps(out))
`;
const q = (s: string) => `'${s.replace(/'/g, `'"'"'`)}'`;

const n = 244 + (process.pid % 6);
const fi = await startFakeInternet(n);
const { driver, options, dataDir } = makeTestDriver('secretsbench', {
  egressVia: fi.via,
  egressDns: [{ host: NET.dns, port: 53 }],
  egressCaFile: fi.caFile,
  netPoolSize: 0,
});
const uplink = watchUplink(`sbench${n}`, options.subnet!, uplinkDev(), fi.hostDev);
const samples: Record<string, number[]> = {};
try {
  await driver.init();
  await driver.recover();
  const allow = { allow: [NET.allowed.name] };
  const mk = (id: string, egress: 'internet' | { allow: string[] }, withRule: boolean) =>
    driver.create({
      id: `${id}_${process.pid}`,
      image: IMAGE,
      env: { KEY: PH },
      volumes: [],
      limits: LIMITS,
      egress,
      secrets: withRule
        ? [
            {
              secret: 'KEY',
              domains: [NET.allowed.name],
              header: 'Authorization',
              format: 'Bearer {value}',
              placeholder: PH,
              value: 'bench-secret-value-0123456789',
            },
          ]
        : undefined,
    });
  const boxes = [
    ['injected', await mk('sb_inj', allow, true)],
    ['relayed', await mk('sb_rel', allow, false)],
    ['bare', await mk('sb_bare', 'internet', false)],
  ] as const;
  let injections = 0;
  const off = driver.onInjection(() => injections++);
  for (let i = 0; i < RUNS + WARMUP; i++) {
    for (const [mode, sb] of boxes) {
      const r = await driver.exec(sb.id, `python3 -c ${q(ROUND_PY)} ${NET.allowed.name} ${PH}`, { timeoutMs: 60_000 });
      if (r.exitCode !== 0) throw new Error(`${mode}: ${r.stderr}`);
      if (i < WARMUP) continue;
      for (const [c, ms] of Object.entries(JSON.parse(r.stdout) as Record<string, number>)) {
        samples[`${c}, ${mode}`] ??= [];
        samples[`${c}, ${mode}`].push(ms);
      }
    }
  }
  off();
  const injectedAtEcho = fi.log.filter(
    (l) => l.http?.headers?.authorization === 'Bearer bench-secret-value-0123456789',
  ).length;
  if (injectedAtEcho !== (RUNS + WARMUP) * 3) throw new Error(`${injectedAtEcho} injected requests reached the echo`);
  const c = uplink.counters();
  if (c.uplink !== 0) throw new Error(`${c.uplink} packets from the sandboxes went toward the real uplink`);
  const rows = Object.entries(samples).map(([k, v]) => {
    const s = summarize(v);
    return { case: k, n: s.n, 'p50 ms': s.p50, 'p95 ms': s.p95, 'mean ms': s.mean };
  });
  const p50 = (k: string) => summarize(samples[k]).p50;
  const cases = ['http, new connection', 'https, new connection', 'https, kept-alive request'];
  const injectionAdds = Object.fromEntries(cases.map((k) => [k, p50(`${k}, injected`) - p50(`${k}, relayed`)]));
  for (const [k, ms] of Object.entries(injectionAdds))
    rows.push({
      case: `${k}: injection adds over relayed (p50)`,
      n: RUNS,
      'p50 ms': ms,
      'p95 ms': Number.NaN,
      'mean ms': Number.NaN,
    });
  report('secrets', rows, {
    runs: RUNS,
    p50Ms: Object.fromEntries(Object.keys(samples).map((k) => [k, p50(k)])),
    injectionAddsP50Ms: injectionAdds,
    injectionEvents: injections,
    uplinkPackets: c.uplink,
  });
} finally {
  await driver.destroyAll().catch((e) => console.error('destroyAll', e));
  await driver.close();
  uplink.close();
  await fi.close();
  rmSync(dataDir, { recursive: true, force: true });
}
