/**
 * Connection set-up through egress rules: from inside a sandbox, name lookup (through
 * sandboxd's resolver) + TCP connect + request + first byte, for a sandbox with `allow`
 * rules against one with `internet` (no rules), in the same run, taking turns, against the
 * fake internet of the e2e suite (test/e2e/fake-internet.ts): no packet leaves the machine
 * (egress is routed into it with `egressVia`, and the host's uplink is watched: the run
 * fails if a packet from the sandboxes went there).
 *
 * - HTTP (port 80) and HTTPS (443, TLS handshake included): `allow` goes through sandboxd's
 *   proxy (Host / SNI checked, then dialled), `internet` straight out;
 * - TCP 8080: `allow` is forwarded when the resolver recorded the name's address (an nft set
 *   element with the answer's TTL, written before the answer is sent; the same answer again
 *   within half its TTL writes nothing), `internet` straight;
 * - TCP 8080 to a name never asked before (`r<n>.wild.fake.test`): the nft write is paid.
 *
 * BENCH_EGRESS_RUNS rounds (default 40) after 5 warm-up rounds, each round a fresh lookup
 * and connection per case. Target: the rules add at most a few ms at p50.
 */
import { rmSync } from 'node:fs';
import { makeTestDriver } from '../packages/server/test/local-driver.js';
import { NET, startFakeInternet, uplinkDev, watchUplink } from '../test/e2e/fake-internet.js';
import { report, summarize } from './stats.js';

const RUNS = Number(process.env.BENCH_EGRESS_RUNS ?? 40);
const WARMUP = 5;
const IMAGE = 'local/debian:bookworm';
const LIMITS = { memoryBytes: 512 << 20, cpus: 1, pids: 256, rootDiskBytes: 1 << 30 };

/** One round in the sandbox: per case, ms from lookup to the first byte of the answer. */
const ROUND_PY = String.raw`
import json, socket, ssl, sys, time
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
out = {}
for case, port, name in (('http', 80, sys.argv[1]), ('https', 443, sys.argv[1]), ('tcp 8080', 8080, sys.argv[1]), ('tcp 8080 new name', 8080, sys.argv[2])):
    t = time.perf_counter()
    addr = socket.getaddrinfo(name, port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
    s = socket.create_connection(addr, timeout=5)
    if port == 443:
        s = ctx.wrap_socket(s, server_hostname=name)
    s.sendall(('GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' % name).encode())
    s.recv(1)
    out[case] = (time.perf_counter() - t) * 1000
    s.close()
print(json.dumps(out))
`;
const q = (s: string) => `'${s.replace(/'/g, `'"'"'`)}'`;

const n = 250 + (process.pid % 6);
const fi = await startFakeInternet(n);
const { driver, options, dataDir } = makeTestDriver('egressbench', {
  egressVia: fi.via,
  egressDns: [{ host: NET.dns, port: 53 }],
  netPoolSize: 0,
});
const uplink = watchUplink(`bench${n}`, options.subnet!, uplinkDev(), fi.hostDev);
const samples: Record<string, number[]> = {};
try {
  await driver.init();
  await driver.recover();
  const spec = (id: string, egress: 'internet' | { allow: string[] }) => ({
    id,
    image: IMAGE,
    env: {},
    volumes: [],
    limits: LIMITS,
    egress,
  });
  const ruled = await driver.create(
    spec(`egb_r_${process.pid}`, { allow: [NET.allowed.name, `*.${NET.wild.suffix}`] }),
  );
  const open = await driver.create(spec(`egb_i_${process.pid}`, 'internet'));
  for (let i = 0; i < RUNS + WARMUP; i++) {
    for (const [mode, sb] of [
      ['allow rules', ruled],
      ['internet', open],
    ] as const) {
      const fresh = `r${i}-${mode === 'internet' ? 'i' : 'a'}.${NET.wild.suffix}`;
      const r = await driver.exec(sb.id, `python3 -c ${q(ROUND_PY)} ${NET.allowed.name} ${fresh}`, {
        timeoutMs: 60_000,
      });
      if (r.exitCode !== 0) throw new Error(`${mode}: ${r.stderr}`);
      if (i < WARMUP) continue;
      for (const [c, ms] of Object.entries(JSON.parse(r.stdout) as Record<string, number>)) {
        samples[`${c}, ${mode}`] ??= [];
        samples[`${c}, ${mode}`].push(ms);
      }
    }
  }
  const c = uplink.counters();
  if (c.uplink !== 0) throw new Error(`${c.uplink} packets from the sandboxes went toward the real uplink`);
  const rows = Object.entries(samples).map(([k, v]) => {
    const s = summarize(v);
    return { case: k, n: s.n, 'p50 ms': s.p50, 'p95 ms': s.p95, 'mean ms': s.mean };
  });
  const p50 = (k: string) => summarize(samples[k]).p50;
  const overhead = Object.fromEntries(
    ['http', 'https', 'tcp 8080', 'tcp 8080 new name'].map((c) => [
      c,
      p50(`${c}, allow rules`) - p50(`${c}, internet`),
    ]),
  );
  rows.push(
    ...Object.entries(overhead).map(([c, ms]) => ({
      case: `${c}: rules add (p50)`,
      n: RUNS,
      'p50 ms': ms,
      'p95 ms': Number.NaN,
      'mean ms': Number.NaN,
    })),
  );
  report('egress', rows, {
    runs: RUNS,
    p50Ms: Object.fromEntries(Object.keys(samples).map((k) => [k, p50(k)])),
    rulesAddP50Ms: overhead,
    uplinkPackets: c.uplink,
    viaPackets: c.via,
  });
} finally {
  await driver.destroyAll().catch((e) => console.error('destroyAll', e));
  await driver.close();
  uplink.close();
  await fi.close();
  rmSync(dataDir, { recursive: true, force: true });
}
