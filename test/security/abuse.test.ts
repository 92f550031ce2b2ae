/**
 * Resource abuse: a fork bomb, a memory hog, a disk filled past a volume's cap and in the
 * root layer, and floods of output, each in its own sandbox through the public API. Each
 * must stay inside its sandbox's limits (checked from the host's cgroup counters and disk
 * usage) and leave the host and a second sandbox answering. The second sandbox's exec
 * latency (p50 of sequential execs) before and during each abuse is printed, never asserted.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { memoryUsage, oomKills, pidsCounters } from '../../packages/server/src/runtime/local/bundle/cgroup-fs.js';
import { TermClient, terminalUrl } from '../../packages/server/test/terminals.js';
import { GVISOR_HOST_TASKS } from '../../packages/server/src/runtime/local/bundle/oci-config.js';
import { GVISOR, newAccount, RUNTIME, startServer, type Server } from '../e2e/harness.js';
import { localOptions } from '../e2e/local-runtime.js';
import { Api, BUSYBOX, DEBIAN, execLatencies, p50, sleep, SOAK, table } from './escape-support.js';

const local = RUNTIME === 'local';
const GiB = 2 ** 30;
/** The FREE plan's limits, with a smaller root disk unless soaking (filling 10 GiB takes minutes). */
const LIMITS = { memoryBytes: 2 * GiB, cpus: 1, pids: 512, rootDiskBytes: SOAK ? 10 * GiB : 1 * GiB };
const PROBES = Number(process.env.SANDBOXD_ABUSE_PROBES) || (SOAK ? 100 : 20);
const WINDOW_MS = SOAK ? 20_000 : 2_000;

describe('resource abuse leaves the host and other sandboxes answering', {
  skip: !local && 'needs SANDBOXD_E2E_RUNTIME=local',
  timeout: 900_000,
}, () => {
  let s: Server;
  let api: Api;
  let probe = '';
  let cgroupParent = '';
  let base = { exec: 0, health: 0 };
  const rows: Array<Record<string, string | number>> = [];
  const cfgDir = mkdtempSync(join(tmpdir(), 'sandboxd-abuse-cfg-'));

  // The host's cgroup counters (v1 or v2 names: cgroup-fs.ts); -1 when unreadable.
  const pids = (id: string) => pidsCounters(cgroupParent, id);
  const kills = (id: string) => oomKills(cgroupParent, id) ?? -1;
  const memPeak = (id: string) => memoryUsage(cgroupParent, id).peakBytes ?? -1;
  const serverRss = () =>
    Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${s.proc.pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;
  /**
   * p50 of the probe sandbox's exec latency and of /healthz, over at least PROBES execs and
   * WINDOW_MS (so that a window spans the abuse's cycles), at most 500 execs.
   */
  const measure = async () => {
    const execs: number[] = [];
    const health: number[] = [];
    const t0 = performance.now();
    while (execs.length < 500 && (execs.length < PROBES || performance.now() - t0 < WINDOW_MS)) {
      execs.push(...(await execLatencies(api, probe, 5)));
      const h0 = performance.now();
      assert.equal((await fetch(`${s.baseUrl}/healthz`)).status, 200);
      health.push(performance.now() - h0);
    }
    return { exec: p50(execs), health: p50(health), n: execs.length };
  };
  /** Measures the probe sandbox just before an abuse starts. */
  const baseline = async () => {
    base = await measure();
  };
  /** Measures it while the abuse runs; records a row (`contained` is read after the measurement). */
  const during = async (abuse: string, contained: () => string) => {
    const now = await measure();
    const ratio = now.exec / base.exec;
    rows.push({
      abuse,
      'p50 before ms': base.exec.toFixed(1),
      'p50 during ms': now.exec.toFixed(1),
      ratio: ratio.toFixed(2),
      execs: now.n,
      'healthz ratio': (now.health / base.health).toFixed(2),
      contained: contained(),
    });
    console.log(
      `# ${abuse}: probe exec p50 ${base.exec.toFixed(1)} -> ${now.exec.toFixed(1)} ms (x${ratio.toFixed(2)}, ${now.n} execs), healthz p50 x${(now.health / base.health).toFixed(2)}`,
    );
  };
  /** The probe still answers right after the abuse is gone. */
  const recovered = async () => {
    assert.equal((await api.exec(probe, 'echo back')).stdout, 'back\n');
  };

  before(async () => {
    const cfg = join(cfgDir, 'config.json');
    writeFileSync(
      cfg,
      JSON.stringify({
        plans: { ABUSE: { concurrency: 10, maxLifetimeMs: 3_600_000, signupTokens: 10_000, limits: LIMITS } },
      }),
    );
    s = await startServer({ env: { SANDBOXD_CONFIG: cfg } });
    cgroupParent = localOptions(s.dataDir).cgroupParent!;
    api = new Api(s, (await newAccount(s, { tokens: 100_000, plan: 'ABUSE' })).key);
    probe = await api.create({ image: BUSYBOX });
    await execLatencies(api, probe, 5); // warm
    console.log(
      `# limits ${JSON.stringify(LIMITS)}; each figure is the p50 of at least ${PROBES} sequential execs over at least ${WINDOW_MS} ms`,
    );
  });
  after(async () => {
    if (rows.length) console.log(table(rows));
    await s?.stop();
    rmSync(cfgDir, { recursive: true, force: true });
  });

  it('a fork bomb stops at its pids limit; its sandbox can still be deleted', async () => {
    const x = await api.create({ image: BUSYBOX });
    await baseline();
    await api.background(x, 'f() { f | f & }; f');
    let refused = 0;
    let peak = 0;
    for (let i = 0; i < 400 && refused === 0; i++) {
      peak = Math.max(peak, pids(x).current ?? 0);
      refused = pids(x).refused ?? 0;
      if (refused === 0) await sleep(25);
    }
    assert.ok(refused > 0, `no fork was refused at the pids limit (peak ${peak})`);
    await during('fork bomb', () => `pids ${pids(x).current}/${LIMITS.pids}, refused forks ${pids(x).refused}`);
    // gVisor: the host cgroup counts the Sentry's threads too, and allows that many more.
    assert.ok((pids(x).current ?? Infinity) <= LIMITS.pids + (GVISOR ? GVISOR_HOST_TASKS : 0));
    if (GVISOR) {
      // gVisor: the pids limit counts the host's tasks of the sandbox (the Sentry's threads
      // and, on ptrace, one stub per thread of the sandbox), not its own processes.
      const st = await s.api('GET', `/api/v1/sandboxes/${x}`, { key: api.key });
      console.log(
        `# gVisor: after the fork bomb the sandbox is ${st.body?.sandbox?.state} (${pids(x).current} host tasks)`,
      );
    }
    const t0 = performance.now();
    await api.delete(x);
    console.log(`# deleting the fork-bombed sandbox took ${(performance.now() - t0).toFixed(0)} ms`);
    await recovered();
  });

  it('a memory hog is OOM-killed inside its own memory limit, over and over', async () => {
    const x = await api.create({ image: DEBIAN });
    // Allocates and touches 64 MiB blocks until the cgroup's OOM killer stops it; again and again.
    const rounds = SOAK ? 200 : 40;
    await api.exec(x, `printf '%s\\n' 'a = []' 'while True: a.append(b"x" * (64 << 20))' > /tmp/hog.py`);
    await baseline();
    const pid = await api.background(x, `i=0; while [ $i -lt ${rounds} ]; do i=$((i+1)); python3 /tmp/hog.py; done`);
    let killed = 0;
    for (let i = 0; i < 400 && killed <= 0; i++) {
      killed = kills(x);
      if (killed <= 0) await sleep(25);
    }
    assert.ok(killed > 0, 'the hog was never OOM-killed');
    await during(
      'memory hog',
      () => `max usage ${(memPeak(x) / GiB).toFixed(2)} GiB of ${LIMITS.memoryBytes / GiB}, OOM kills ${kills(x)}`,
    );
    assert.ok(memPeak(x) >= 0 && memPeak(x) <= LIMITS.memoryBytes);
    const one = await api.execRaw(x, 'python3 /tmp/hog.py; echo rc=$?', { timeoutMs: 60_000 });
    if (GVISOR && one.status === 409) {
      // gVisor: every process of the sandbox lives in one host process, the Sentry, and that
      // is what the host's OOM killer finds in the sandbox's cgroup and kills: the whole
      // sandbox ends at its limit (409 "not running" from then on), not only the hog. Still
      // inside its own limit (asserted above), the neighbour answers (recovered(), below).
      console.log(`# gVisor: the OOM kill ended the whole sandbox: ${one.body.message}`);
    } else {
      assert.equal(one.status, 200, JSON.stringify(one.body));
      assert.match(one.body.stdout, /rc=137/, 'a foreground hog is killed by SIGKILL (137)');
    }
    await api.exec(x, `kill ${pid}`).catch(() => undefined);
    await api.delete(x);
    await recovered();
  });

  it("filling a volume stops at its cap with ENOSPC; the host's file stays within the cap", async () => {
    const x = await api.create({ image: BUSYBOX, volumes: { '/data': { name: 'fill', sizeGb: 1 } } });
    await baseline();
    const rounds = SOAK ? 30 : 6;
    const pid = await api.background(
      x,
      `i=0; while [ $i -lt ${rounds} ]; do i=$((i+1)); dd if=/dev/zero of=/data/f bs=1M count=1500 2>/dev/null; sync; rm -f /data/f; done`,
    );
    await sleep(1000);
    await during('volume filled past its cap', () => 'ENOSPC at 1 GiB');
    await api.exec(x, `kill ${pid}; sleep 0.2; rm -f /data/f`);
    const r = await api.exec(
      x,
      'dd if=/dev/zero of=/data/big bs=1M count=1500 2>&1; echo rc=$?; df -k /data | tail -1',
      { timeoutMs: 120_000 },
    );
    assert.match(r.stdout, /No space left on device/);
    assert.match(r.stdout, /rc=1/);
    const volDir = join(s.dataDir, 'volumes');
    const img = readdirSync(volDir)
      .filter((d) => d.endsWith('__fill'))
      .map((d) => join(volDir, d, 'volume.img'))[0];
    const st = statSync(img);
    console.log(
      `# volume image on the host: apparent ${(st.size / GiB).toFixed(2)} GiB, allocated ${((st.blocks * 512) / GiB).toFixed(2)} GiB`,
    );
    assert.ok(st.blocks * 512 <= 1 * GiB + (1 << 20), `volume file takes ${st.blocks * 512} bytes on the host`);
    assert.equal((await api.exec(x, 'rm /data/big && echo freed')).stdout, 'freed\n');
    await api.delete(x);
    assert.equal((await s.api('DELETE', '/api/v1/volumes/fill', { key: api.key })).status, 204);
    await recovered();
  });

  it("filling the root layer stops at its cap with ENOSPC; the host's disk is not filled", async () => {
    const x = await api.create({ image: BUSYBOX });
    await baseline();
    const mb = Math.round((LIMITS.rootDiskBytes * 1.5) / 2 ** 20);
    const rounds = SOAK ? 10 : 4;
    const pid = await api.background(
      x,
      `i=0; while [ $i -lt ${rounds} ]; do i=$((i+1)); dd if=/dev/zero of=/fill bs=1M count=${mb} 2>/dev/null; sync; rm -f /fill; done`,
    );
    await sleep(1000);
    await during('root layer filled past its cap', () => `ENOSPC at ${LIMITS.rootDiskBytes / GiB} GiB`);
    await api.exec(x, `kill ${pid}; sleep 0.2; rm -f /fill`);
    const r = await api.exec(x, `dd if=/dev/zero of=/big bs=1M count=${mb} 2>&1; echo rc=$?`, { timeoutMs: 300_000 });
    assert.match(r.stdout, /No space left on device/);
    assert.match(r.stdout, /rc=1/);
    const rootsDir = join(s.dataDir, 'roots');
    for (const f of readdirSync(rootsDir).filter((n) => n.endsWith('.img'))) {
      const st = statSync(join(rootsDir, f));
      assert.ok(st.blocks * 512 <= LIMITS.rootDiskBytes + (1 << 20), `${f} takes ${st.blocks * 512} bytes on the host`);
    }
    assert.equal((await api.exec(x, 'rm /big && echo freed')).stdout, 'freed\n');
    await api.delete(x);
    await recovered();
  });

  it('floods of output (foreground execs past the output cap, background writers, a terminal nobody reads) are cut and dropped', async () => {
    const x = await api.create({ image: BUSYBOX });
    await baseline();
    const rssBefore = serverRss();
    const bgPids: number[] = [];
    for (let i = 0; i < 8; i++) bgPids.push(await api.background(x, 'exec yes escape-flood'));
    const t = await s.api('POST', `/api/v1/sandboxes/${x}/terminals`, { key: api.key, body: { shell: 'sh' } });
    assert.equal(t.status, 201, t.text);
    const tc = await TermClient.connect(terminalUrl(s.baseUrl, x, t.body.terminal.id), {
      authorization: `Bearer ${api.key}`,
    });
    await tc.control('ready');
    tc.type('yes terminal-flood\r');
    await tc.waitForOutput(/terminal-flood\r\nterminal-flood/);
    tc.close(); // nobody reads it any more; the shell keeps writing
    const fgSeconds = SOAK ? 60 : 6;
    const fg = Array.from({ length: 4 }, () => api.execRaw(x, 'yes foreground-flood', { timeoutMs: fgSeconds * 1000 }));
    await sleep(1000);
    await during('output floods', () => '');
    const results = await Promise.all(fg);
    for (const r of results) {
      assert.equal(r.status, 200);
      assert.equal(r.body.truncated, true);
      assert.equal(r.body.exitCode, 124, 'cut by its timeout');
      assert.equal(Buffer.byteLength(r.body.stdout), 1024 * 1024, 'stdout is cut at 1 MiB');
    }
    const rssAfter = serverRss();
    rows[rows.length - 1].contained =
      `4 x ${fgSeconds} s of yes cut at 1 MiB each; server RSS ${(rssBefore / 2 ** 20).toFixed(0)} -> ${(rssAfter / 2 ** 20).toFixed(0)} MiB`;
    console.log(`# server RSS ${(rssBefore / 2 ** 20).toFixed(0)} -> ${(rssAfter / 2 ** 20).toFixed(0)} MiB`);
    assert.ok(rssAfter - rssBefore < 512 * 2 ** 20, 'the server kept the flood in memory');
    await api.delete(x);
    await recovered();
  });
});
