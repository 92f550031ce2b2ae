import assert from 'node:assert/strict';
import { connect, createServer, type Server } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { CONFORMANCE_LIMITS, runDriverConformance, testId } from '../conformance.js';
import type { SandboxSpec } from '../driver.js';
import { oomKills, pidsCounters } from './bundle/cgroup-fs.js';
import { mountsUnder } from './rootfs/mounts.js';
import type { LocalDriver } from './driver.js';
import { makeTestDriver } from '../../../test/local-driver.js';

const cleanup: string[] = [];
for (const ociRuntime of ['crun', 'runc'] as const) {
  runDriverConformance({
    name: `local (${ociRuntime})`,
    image: 'local/busybox:latest',
    make: async () => {
      const { driver, dataDir } = makeTestDriver(`conf${ociRuntime}`, { ociRuntime });
      cleanup.push(dataDir);
      await driver.init();
      await driver.recover();
      return driver;
    },
    destroy: async (d) => {
      await (d as LocalDriver).destroyAll();
      for (const dir of cleanup.splice(0)) rmSync(dir, { recursive: true, force: true });
    },
  });
}

/** `driver` with every create made in the gVisor tier (the suite's specs name none). */
function inGvisor(driver: LocalDriver): LocalDriver {
  const create = driver.create.bind(driver);
  driver.create = (spec) => create({ ...spec, isolation: spec.isolation ?? 'gvisor' });
  return driver;
}

runDriverConformance({
  name: 'local (gvisor: runsc)',
  image: 'local/busybox:latest',
  make: async () => {
    const { driver, dataDir } = makeTestDriver('confgvisor', {});
    cleanup.push(dataDir);
    await driver.init();
    await driver.recover();
    return inGvisor(driver);
  },
  destroy: async (d) => {
    await (d as LocalDriver).destroyAll();
    for (const dir of cleanup.splice(0)) rmSync(dir, { recursive: true, force: true });
  },
});

/**
 * `driver` with each create made once the warm pool is full, so that every create without
 * volumes claims a pooled sandbox.
 */
function claimingFromPool(driver: LocalDriver): LocalDriver {
  const create = driver.create.bind(driver);
  driver.create = async (spec) => {
    await driver.refillPools();
    return create(spec);
  };
  return driver;
}

runDriverConformance({
  name: 'local (crun, warm pool)',
  image: 'local/busybox:latest',
  make: async () => {
    const { driver, dataDir } = makeTestDriver('confwarm', {
      warmPool: [{ image: 'local/busybox:latest', size: 2 }],
      // Other memory, CPU and pid limits than the suite's: each claim applies the suite's.
      warmLimits: { ...CONFORMANCE_LIMITS, memoryBytes: 512 << 20, pids: 300, cpus: 2 },
    });
    cleanup.push(dataDir);
    await driver.init();
    await driver.recover();
    return claimingFromPool(driver);
  },
  destroy: async (d) => {
    await (d as LocalDriver).destroyAll();
    for (const dir of cleanup.splice(0)) rmSync(dir, { recursive: true, force: true });
  },
});

const LIMITS = { memoryBytes: 128 * 1024 * 1024, cpus: 0.5, pids: 64, rootDiskBytes: 64 * 1024 * 1024 };

for (const warm of [false, true])
  describe(`local driver isolation${warm ? ', sandboxes claimed from the warm pool' : ''}`, () => {
    let driver: LocalDriver;
    let base: string;
    let cgroupParent = '';
    let hostServer: Server;
    let hostPort = 0;
    const spec = (over: Partial<SandboxSpec> = {}): SandboxSpec => ({
      id: testId('iso'),
      image: 'local/busybox:latest',
      env: {},
      volumes: [],
      limits: LIMITS,
      ...over,
    });
    let a: string;
    let b: string;
    let bAddr: string;

    before(async () => {
      let options: ReturnType<typeof makeTestDriver>['options'];
      ({
        driver,
        dataDir: base,
        options,
      } = makeTestDriver(
        warm ? 'isowarm' : 'iso',
        warm
          ? {
              warmPool: [{ image: 'local/busybox:latest', size: 2 }],
              // Looser than LIMITS: the memory and pids tests below see the claim's limits applied.
              warmLimits: { ...LIMITS, memoryBytes: 1 << 30, pids: 1024, cpus: 1 },
            }
          : {},
      ));
      if (warm) claimingFromPool(driver);
      cgroupParent = options.cgroupParent!;
      await driver.init();
      await driver.recover();
      hostServer = createServer((s) => s.end('host-secret\n'));
      await new Promise<void>((r) => hostServer.listen(0, '0.0.0.0', r));
      hostPort = (hostServer.address() as { port: number }).port;
      a = (await driver.create(spec())).id;
      const sb = await driver.create(spec());
      b = sb.id;
      bAddr = sb.address;
    });
    after(async () => {
      hostServer.close();
      await driver.destroyAll();
      rmSync(base, { recursive: true, force: true });
    });

    const sh = (id: string, cmd: string, timeoutMs = 20_000) => driver.exec(id, cmd, { timeoutMs });

    it('sees only its own processes, with the exec agent as PID 1', async () => {
      const r = await sh(a, 'ls -d /proc/[0-9]* | wc -l; cat /proc/1/cmdline | tr "\\0" " "');
      const [count, cmdline] = r.stdout.trim().split('\n');
      assert.ok(Number(count) <= 5, `saw ${count} processes`);
      assert.match(cmdline, /^\/dev\/sandboxd-agent --init/);
    });

    it("starts a PTY as a user named in the sandbox's own /etc/passwd; an unknown name is refused", async () => {
      await sh(a, "echo 'ptyuser:x:1234:1235::/tmp:/bin/sh' >> /etc/passwd");
      const pty = await driver.execTty(a, {
        argv: ['/bin/sh', '-c', 'echo "ids $(id -u):$(id -g)"'],
        user: 'ptyuser',
        cols: 80,
        rows: 24,
      });
      let out = '';
      pty.onData((c) => {
        out += c.toString();
      });
      const exit = await new Promise((r) => pty.onExit(r));
      assert.deepEqual(exit, { exitCode: 0, signal: null });
      assert.match(out, /ids 1234:1235/);
      await assert.rejects(driver.execTty(a, { argv: ['/bin/sh'], user: 'ghost', cols: 80, rows: 24 }), {
        kind: 'validation',
        message: /ghost/,
      });
    });

    it("leaves neither its netns name nor its root layer's mounts on the host once started", async () => {
      // Both are dropped after the create answered (settleHost): wait for it, bounded.
      const recs = (driver as unknown as { records: Map<string, { netId?: string; rootId?: string }> }).records;
      const left = async () => {
        const out: string[] = [];
        for (const id of [a, b]) {
          const rec = recs.get(id)!;
          const name = `/run/netns/sbx-${rec.netId ?? id}`;
          if (existsSync(name)) out.push(name);
          out.push(...(await mountsUnder(join(base, 'data', 'roots', rec.rootId ?? id))).map((m) => m.mountPoint));
        }
        return out;
      };
      for (let i = 0; i < 100 && (await left()).length > 0; i++) await new Promise((r) => setTimeout(r, 50));
      assert.deepEqual(await left(), []);
      assert.equal((await sh(a, 'echo up')).stdout, 'up\n', 'the sandbox still runs on them');
    });

    it('runs root as an unprivileged host uid in its own user namespace', async () => {
      const r = await sh(a, 'cat /proc/self/uid_map; id -u');
      const [map, uid] = r.stdout.trim().split('\n');
      const [inside, outside] = map.trim().split(/\s+/).map(Number);
      assert.equal(inside, 0);
      assert.ok(outside >= 100_000, `root maps to host uid ${outside}`);
      assert.equal(uid, '0');
    });

    it('sees no host or sibling network device, in /sys or through netlink', async () => {
      const host = readdirSync('/sys/class/net').filter((n) => n !== 'lo');
      assert.ok(host.length >= 3, `host devices: ${host}`); // eth0, the bridge, the other sandbox's veth
      const seen = (
        await sh(
          a,
          'ls /sys/class/net; find /sys/devices /sys/class -maxdepth 6 2>/dev/null | grep "/net/" ; ip -o link',
        )
      ).stdout;
      for (const name of host)
        assert.ok(
          !new RegExp(`\\b${name}\\b(?!@)`).test(seen.replace(/eth0@if\d+/g, '')),
          `${name} is visible inside: ${seen}`,
        );
    });

    it('cannot reach the host services, on any host address', async () => {
      const gw = (await sh(a, "ip route | awk '/default/ {print $3}'")).stdout.trim();
      assert.match(gw, /^\d+\.\d+\.\d+\.\d+$/);
      for (const target of [`${gw} ${hostPort}`, `${gw} 2024`, `192.0.2.2 ${hostPort}`, `127.0.0.1 ${hostPort}`]) {
        const r = await sh(a, `nc -w 1 ${target} </dev/null; echo rc=$?`);
        assert.doesNotMatch(r.stdout, /host-secret/, `reached ${target}`);
      }
    });

    it('cannot reach other sandboxes, while the host can', async () => {
      await driver.execBackground(b, 'while true; do echo from-b | nc -l -p 8000; done');
      let hostSaw = '';
      for (let i = 0; i < 50 && !hostSaw.includes('from-b'); i++) {
        hostSaw = await new Promise<string>((resolve) => {
          const s = connect(8000, bAddr);
          let got = '';
          s.on('data', (d: Buffer) => {
            got += d.toString();
          });
          s.on('close', () => resolve(got));
          s.on('error', () => resolve(''));
          s.setTimeout(1000, () => s.destroy());
        });
        if (!hostSaw.includes('from-b')) await new Promise((r) => setTimeout(r, 50));
      }
      assert.match(hostSaw, /from-b/);
      const r = await sh(a, `nc -w 1 ${bAddr} 8000 </dev/null; echo rc=$?`);
      assert.doesNotMatch(r.stdout, /from-b/);
    });

    it('its seccomp filter refuses the denied syscalls with EPERM and lets the rest through', async () => {
      const deb = await driver.create(spec({ image: 'local/debian:bookworm' }));
      // x86_64 numbers: keyctl 250, add_key 248, bpf 321, perf_event_open 298, userfaultfd 323,
      // unshare 272, mount 165, setns 308, init_module 175, kexec_load 246, clone3 435; getppid 110.
      const py = `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *a):
    r = libc.syscall(nr, *a)
    return 0 if r >= 0 else ctypes.get_errno()
for name, nr in [("keyctl", 250), ("add_key", 248), ("bpf", 321), ("perf_event_open", 298), ("userfaultfd", 323),
                 ("unshare", 272), ("mount", 165), ("setns", 308), ("init_module", 175), ("kexec_load", 246), ("clone3", 435), ("getppid", 110),
                 ("x32_getppid", 0x40000000 | 110), ("x32_mount", 0x40000000 | 165)]:
    print(name, call(nr, 0, 0, 0, 0, 0))
print("alive", 0)
`;
      const r = await driver.exec(deb.id, `python3 -c '${py}'`, { timeoutMs: 20_000 });
      const got = Object.fromEntries(
        r.stdout
          .trim()
          .split('\n')
          .map((l) => l.split(' '))
          .map(([k, v]) => [k, Number(v)]),
      );
      const EPERM = 1;
      const ENOSYS = 38;
      for (const name of [
        'keyctl',
        'add_key',
        'bpf',
        'perf_event_open',
        'userfaultfd',
        'unshare',
        'mount',
        'setns',
        'init_module',
        'kexec_load',
      ]) {
        assert.equal(got[name], EPERM, `${name}: errno ${got[name]} (${r.stderr})`);
      }
      assert.equal(got.clone3, ENOSYS);
      assert.equal(got.getppid, 0);
      // x32 numbers (bit 30): refused, never a kill. ENOSYS where the kernel runs no x32 code
      // (the filter then has no x32 rules); the x86_64 answers where it does.
      assert.equal(got.alive, 0, `killed: ${r.exitCode} ${r.stderr}`);
      assert.ok([0, ENOSYS].includes(got.x32_getppid), `x32 getppid: ${got.x32_getppid}`);
      assert.ok([EPERM, ENOSYS].includes(got.x32_mount), `x32 mount: ${got.x32_mount}`);
      await driver.delete(deb.id);
    });

    it('cannot mount, load modules, make or reach raw devices, or change sysctls', async () => {
      const checks: [string, RegExp][] = [
        ['mount -t tmpfs none /mnt', /rc=[1-9]/],
        ['mount --bind / /mnt', /rc=[1-9]/],
        ['unshare -U -r true', /rc=[1-9]/],
        ['insmod /nonexistent.ko', /rc=[1-9]/],
        ['mknod /tmp/sda b 8 0', /rc=[1-9]/],
        ['ls /dev/sda /dev/vda /dev/mem /dev/kmsg', /rc=[1-9]/],
        ['echo 1 > /proc/sys/kernel/sysrq', /rc=[1-9]/],
        ['echo b > /proc/sysrq-trigger', /rc=[1-9]/],
        ['cat /proc/kcore | head -c 1', /rc=0/], // masked: reads as empty
        ['echo 1 > /sys/kernel/mm/ksm/run', /rc=[1-9]/],
      ];
      for (const [cmd, want] of checks) {
        const r = await sh(a, `${cmd} 2>/dev/null; echo rc=$?`);
        assert.match(r.stdout, want, `$cmd-> $r.stdout.trim()`);
      }
      assert.equal((await sh(a, 'head -c 10 /proc/kcore | wc -c')).stdout.trim(), '0');
    });

    it("has /dev/shm: a sticky, world-writable directory of /dev's 64 MiB noexec, nodev tmpfs", async () => {
      const r = await sh(
        a,
        "stat -c '%a %u' /dev/shm; stat -f -c '%T' /dev/shm; df -k /dev/shm | tail -1 | awk '{print $2}';" +
          " grep ' /dev/shm ' /proc/self/mountinfo | wc -l; grep ' /dev ' /proc/self/mountinfo | cut -d' ' -f6",
      );
      const [mode, fs, kib, ownMounts, devOptions] = r.stdout.trim().split('\n');
      assert.equal(mode, '1777 0');
      assert.equal(fs, 'tmpfs');
      assert.equal(kib, '65536');
      assert.equal(ownMounts, '0', 'no file system instance of its own');
      assert.match(devOptions, /(^|,)nosuid(,|$)/);
      assert.match(devOptions, /(^|,)nodev(,|$)/);
      assert.match(devOptions, /(^|,)noexec(,|$)/);
      // Another user than root can use it (sticky: not remove root's files); nothing there runs.
      const u = await sh(
        a,
        'echo root > /dev/shm/r; cp /bin/busybox /dev/shm/bb; chmod 755 /dev/shm/bb; /dev/shm/bb true; echo exec=$?;' +
          " su -s /bin/sh nobody -c 'echo u > /dev/shm/u && cat /dev/shm/u; rm -f /dev/shm/r; echo rm=$?'",
      );
      assert.match(u.stdout, /exec=126/);
      assert.match(u.stdout, /^u$/m);
      assert.match(u.stdout, /rm=1/);
      assert.equal((await sh(a, 'cat /dev/shm/r; rm -f /dev/shm/*')).stdout, 'root\n');
    });

    const cid = (id: string) => driver.containerIdOf(id)!;

    it(warm ? 'was claimed from the warm pool' : 'was started for its create', () => {
      for (const id of [a, b]) assert.equal(driver.containerIdOf(id)?.startsWith('warm_'), warm, id);
    });

    it('kills a memory hog inside its own memory limit', async () => {
      const hog = await driver.create(spec());
      // tail keeps its one endless line in memory: it grows until the cgroup's OOM killer stops it.
      const r = await sh(hog.id, 'head -c 400m /dev/zero | tail > /dev/null; echo rc=$?', 30_000);
      assert.match(r.stdout, /rc=137/);
      assert.ok((oomKills(cgroupParent, cid(hog.id)) ?? 0) > 0, 'the cgroup counts an OOM kill');
      assert.equal((await sh(b, 'echo alive')).stdout, 'alive\n');
      await driver.delete(hog.id);
    });

    it('contains a fork bomb at its pids limit while the neighbour stays responsive', async () => {
      const bomb = await driver.create(spec());
      await driver.execBackground(bomb.id, 'f() { f | f & }; f');
      // pids.events counts the forks the kernel refused at the limit: the bomb hit the ceiling.
      let refused = 0;
      let peak = 0;
      for (let i = 0; i < 200 && refused === 0; i++) {
        const n = pidsCounters(cgroupParent, cid(bomb.id));
        peak = Math.max(peak, n.current ?? 0);
        refused = n.refused ?? 0;
        if (refused === 0) await new Promise((r) => setTimeout(r, 25));
      }
      assert.ok(refused > 0, `no fork was refused at the pids limit (peak ${peak})`);
      assert.ok(peak <= LIMITS.pids);
      assert.equal((await sh(b, 'echo alive')).stdout, 'alive\n');
      await driver.delete(bomb.id);
    });

    it('caps the writable root: writes past it fail with ENOSPC', async () => {
      const r = await sh(a, 'dd if=/dev/zero of=/big bs=1M count=200 2>&1; echo rc=$?', 60_000);
      assert.match(r.stdout, /No space left on device/);
      assert.match(r.stdout, /rc=1/);
      assert.equal((await sh(a, 'rm /big && echo ok')).stdout, 'ok\n');
    });
  });
