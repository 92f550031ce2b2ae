/**
 * Port proxy benchmark: the same sandbox servers reached directly at the sandbox address
 * (what the host can do, the floor) and through the proxy (`<port>-<id>.<publicHost>` on
 * the real server), in the same run, interleaved so machine drift hits both alike.
 *
 *   throughput  curl downloads of a 256 MiB file from busybox httpd (sendfile) in the
 *               sandbox: one stream, and 4 in parallel (aggregate); median of rounds
 *   latency     sequential small GETs from a Node keep-alive client: to the Python app
 *               (HTTP/1.1 keep-alive on both hops) and to busybox httpd (which closes
 *               every connection, so the proxy connects anew each time)
 *
 * Targets: proxy throughput >= 70% of direct, <= 1 ms added at p50.
 * Env: BENCH_ROUNDS (default 7), BENCH_REQUESTS (default 2000).
 */
import { execFile } from 'node:child_process';
import { Agent, request } from 'node:http';
import { promisify } from 'node:util';
import { startLocalServer, startPyApp, waitListening, type LocalServer } from '../test/e2e/proxy-support.js';
import { report, summarize } from './stats.js';

const run = promisify(execFile);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 2000);
const MiB = 1024 * 1024;
const BIG = 256 * MiB;

interface Endpoint {
  /** Where the client connects and the Host it sends. */
  connect: { host: string; port: number };
  hostHeader: string;
}

async function sandbox(
  s: LocalServer,
  image: string,
): Promise<{ id: string; address: string; host: (p: number) => string }> {
  const c = await s.api('POST', '/api/v1/sandboxes', { body: { image, timeoutMs: 3_600_000 } });
  if (c.status !== 201) throw new Error(`create ${image}: ${c.text}`);
  const sb = c.body.sandbox;
  const ip = await s.api('POST', `/api/v1/sandboxes/${sb.id}/exec`, { body: { command: 'hostname -i' } });
  const address = /(\d+\.\d+\.\d+\.\d+)/.exec(ip.body.stdout)?.[1];
  if (!address) throw new Error(`no address for ${sb.id}: ${ip.text}`);
  return { id: sb.id, address, host: (p) => sb.publicAccessUrlTemplate.replace('{{PORT}}', String(p)) };
}

/** MB/s of `streams` parallel curl downloads of `path` (aggregate). */
async function download(e: Endpoint, path: string, streams: number): Promise<number> {
  const t = process.hrtime.bigint();
  const outs = await Promise.all(
    Array.from({ length: streams }, () =>
      run('curl', [
        '-sS',
        '-m',
        '120',
        '-o',
        '/dev/null',
        '-w',
        '%{http_code} %{size_download}',
        '--connect-to',
        `::${e.connect.host}:${e.connect.port}`,
        `http://${e.hostHeader}${path}`,
      ]),
    ),
  );
  const s = Number(process.hrtime.bigint() - t) / 1e9;
  let bytes = 0;
  for (const o of outs) {
    const [code, size] = o.stdout.split(' ');
    if (code !== '200') throw new Error(`download answered ${code}`);
    bytes += Number(size);
  }
  return bytes / s / 1e6;
}

/** Milliseconds of each of `n` sequential GETs of `path` over one keep-alive agent. */
async function latencies(e: Endpoint, agent: Agent, path: string, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = process.hrtime.bigint();
    await new Promise<void>((resolve, reject) => {
      request({ ...e.connect, path, agent, headers: { host: e.hostHeader } }, (res) => {
        if (res.statusCode !== 200) reject(new Error(`GET ${path} answered ${res.statusCode}`));
        res.resume();
        res.on('end', () => resolve());
      })
        .on('error', reject)
        .end();
    });
    out.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  return out;
}

const median = (xs: number[]) => summarize(xs).p50;

const s = await startLocalServer();
try {
  const web = await sandbox(s, 'local/busybox:latest');
  const setup = await s.api('POST', `/api/v1/sandboxes/${web.id}/exec`, {
    body: {
      command: `mkdir -p /www && dd if=/dev/zero of=/www/big bs=1M count=${BIG / MiB} 2>/dev/null && printf 0123456789abcdef > /www/small`,
    },
  });
  if (setup.body?.exitCode !== 0) throw new Error(`setup: ${setup.text}`);
  await s.api('POST', `/api/v1/sandboxes/${web.id}/exec`, {
    body: { command: 'busybox httpd -f -p 8000 -h /www', options: { background: true } },
  });
  const app = await sandbox(s, 'local/debian:bookworm');
  await startPyApp(s, app.id, 8000);
  await waitListening(s, web.host(8000), '/small');
  await waitListening(s, app.host(8000), '/echo');

  const via = (sb: { address: string; host: (p: number) => string }) => ({
    direct: { connect: { host: sb.address, port: 8000 }, hostHeader: `${sb.address}:8000` },
    proxy: { connect: { host: '127.0.0.1', port: s.port }, hostHeader: sb.host(8000) },
  });
  const webEp = via(web);
  const appEp = via(app);

  const tput = { direct1: [] as number[], proxy1: [] as number[], direct4: [] as number[], proxy4: [] as number[] };
  await download(webEp.direct, '/big', 1); // warm the page cache
  await download(webEp.proxy, '/big', 1);
  for (let r = 0; r < ROUNDS; r++) {
    tput.direct1.push(await download(webEp.direct, '/big', 1));
    tput.proxy1.push(await download(webEp.proxy, '/big', 1));
    tput.direct4.push(await download(webEp.direct, '/big', 4));
    tput.proxy4.push(await download(webEp.proxy, '/big', 4));
  }

  const lat: Record<string, number[]> = { appDirect: [], appProxy: [], webDirect: [], webProxy: [] };
  const agents = [new Agent({ keepAlive: true, maxSockets: 1 }), new Agent({ keepAlive: true, maxSockets: 1 })];
  const block = 100;
  for (const [name, ep, path] of [
    ['app', appEp, '/bytes?n=16'],
    ['web', webEp, '/small'],
  ] as const) {
    await latencies(ep.direct, agents[0], path, 200); // warm-up, not counted
    await latencies(ep.proxy, agents[1], path, 200);
    for (let done = 0; done < REQUESTS; done += block) {
      lat[`${name}Direct`].push(...(await latencies(ep.direct, agents[0], path, block)));
      lat[`${name}Proxy`].push(...(await latencies(ep.proxy, agents[1], path, block)));
    }
  }
  for (const a of agents) a.destroy();

  const ratio1 = median(tput.proxy1) / median(tput.direct1);
  const ratio4 = median(tput.proxy4) / median(tput.direct4);
  const sum = Object.fromEntries(Object.entries(lat).map(([k, v]) => [k, summarize(v)]));
  const addedApp = sum.appProxy.p50 - sum.appDirect.p50;
  const addedWeb = sum.webProxy.p50 - sum.webDirect.p50;
  const rows = [
    {
      metric: 'throughput, 1 stream (MB/s, median)',
      direct: median(tput.direct1),
      proxy: median(tput.proxy1),
      'proxy/direct': `${(ratio1 * 100).toFixed(0)}%`,
      target: '>= 70%',
    },
    {
      metric: 'throughput, 4 streams (MB/s, median)',
      direct: median(tput.direct4),
      proxy: median(tput.proxy4),
      'proxy/direct': `${(ratio4 * 100).toFixed(0)}%`,
      target: '>= 70%',
    },
    {
      metric: 'GET keep-alive (python) p50 ms',
      direct: sum.appDirect.p50,
      proxy: sum.appProxy.p50,
      'proxy/direct': `+${addedApp.toFixed(3)} ms`,
      target: '<= +1 ms',
    },
    {
      metric: 'GET keep-alive (python) p99 ms',
      direct: sum.appDirect.p99,
      proxy: sum.appProxy.p99,
      'proxy/direct': `+${(sum.appProxy.p99 - sum.appDirect.p99).toFixed(3)} ms`,
      target: '',
    },
    {
      metric: 'GET new connection (busybox) p50 ms',
      direct: sum.webDirect.p50,
      proxy: sum.webProxy.p50,
      'proxy/direct': `+${addedWeb.toFixed(3)} ms`,
      target: '<= +1 ms',
    },
    {
      metric: 'GET new connection (busybox) p99 ms',
      direct: sum.webDirect.p99,
      proxy: sum.webProxy.p99,
      'proxy/direct': `+${(sum.webProxy.p99 - sum.webDirect.p99).toFixed(3)} ms`,
      target: '',
    },
  ];
  report('proxy', rows, {
    rounds: ROUNDS,
    requests: REQUESTS,
    bigBytes: BIG,
    throughputMBps: Object.fromEntries(Object.entries(tput).map(([k, v]) => [k, median(v)])),
    throughputRatio: { oneStream: ratio1, fourStreams: ratio4 },
    latencyMs: sum,
    addedP50Ms: { keepAlive: addedApp, newConnection: addedWeb },
    meetsTargets: { throughput: ratio1 >= 0.7, latency: addedApp <= 1 && addedWeb <= 1 },
    loadAvg: (await import('node:os')).loadavg(),
  });
} finally {
  await s.teardown();
}
