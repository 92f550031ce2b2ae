/**
 * A fake internet for the egress suite: a network namespace with its own DNS server and
 * HTTP/HTTPS servers on several public-looking addresses (documentation ranges, which no
 * real network routes), joined to the host by a veth. A test server routes its sandboxes'
 * egress into it (`SANDBOXD_EGRESS_VIA=<via>`, `SANDBOXD_EGRESS_DNS=<dns>`), so no sandbox
 * traffic ever needs the host's real uplink; {@link watchUplink} counts (and drops) whatever
 * would go there. Everything made here is removed by `close()`.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { CLOUD_HOST_SERVICES_IPV4 } from '../../packages/server/src/runtime/local/network/rules.js';

const ROOT = resolve(import.meta.dirname, '../..');
const sh = (cmd: string, args: string[], input?: string) =>
  execFileSync(cmd, args, { encoding: 'utf8', input, stdio: ['pipe', 'pipe', 'pipe'] });

/** The fake internet's names and addresses. */
export const NET = {
  dns: '203.0.113.53',
  allowed: { name: 'allowed.fake.test', ip: '203.0.113.10' },
  denied: { name: 'denied.fake.test', ip: '203.0.113.11' },
  /** Every name under `wild.fake.test`. */
  wild: { suffix: 'wild.fake.test', ip: '203.0.113.12' },
  /** Reached by address only (a CIDR rule). */
  cidr: { ip: '198.51.100.20', prefix: '198.51.100.0/24' },
  /** An allowed name whose address is the metadata service's (DNS rebinding). */
  rebind: { name: 'rebind.fake.test', ip: '169.254.169.254' },
  /** Servers that must never be reached from a sandbox: metadata, a private address. */
  metadata: '169.254.169.254',
  private: '172.16.5.5',
  /**
   * Every cloud metadata and host-agent IPv4 address sandboxd lists (rules.ts
   * `CLOUD_HOST_SERVICES`), each served here and named `cloud<i>.fake.test` by its DNS.
   */
  cloud: CLOUD_HOST_SERVICES_IPV4.map((ip, i) => ({ ip, name: `cloud${i}.fake.test` })),
  /** Names under it are asked upstream and never answered (a resolver's pending queries). */
  silent: 'silent.fake.test',
};

export interface FakeInternet {
  netns: string;
  /** The host side of the veth. */
  hostDev: string;
  /** `SANDBOXD_EGRESS_VIA`: the host veth and the namespace's address on it. */
  via: string;
  /** Its address on the link (a host network: never reachable from a sandbox). */
  peer: string;
  /**
   * Everything its servers logged so far: DNS questions (`dns`) and requests (`http`; with
   * the request's method, target and headers for `/echo`).
   */
  log: Array<{
    dns?: string;
    http?: {
      ip: string;
      port: number;
      host: string | null;
      method?: string;
      target?: string;
      headers?: Record<string, string | string[]>;
    };
  }>;
  /**
   * The PEM file of the CA its HTTPS certificates are signed by (made at start in its temp
   * dir): what sandboxd's egress proxy is told to trust (`SANDBOXD_EGRESS_CA_FILE`) in tests.
   */
  caFile: string;
  close(): Promise<void>;
}

/** Builds the fake internet number `n` (0-255, unique on the host while it lives). */
export async function startFakeInternet(n: number): Promise<FakeInternet> {
  const netns = `sbxfi-${n}`;
  const hostDev = `sbxfi${n}`;
  const host = `172.30.${n}.1`;
  const peer = `172.30.${n}.2`;
  const dir = mkdtempSync(join(tmpdir(), 'sbx-fake-internet-'));
  let child: ChildProcess | undefined;
  const fi: FakeInternet = {
    netns,
    hostDev,
    via: `${hostDev}:${peer}`,
    peer,
    log: [],
    caFile: join(dir, 'ca.crt'),
    async close() {
      if (child && child.exitCode === null) {
        const gone = new Promise((r) => child!.once('exit', r));
        child.kill('SIGKILL');
        await gone;
      }
      try {
        sh('ip', ['netns', 'del', netns]);
      } catch {
        /* not made */
      }
      try {
        sh('ip', ['link', 'del', hostDev]);
      } catch {
        /* went with the namespace */
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    const addrs = [
      ...new Set([
        NET.dns,
        NET.allowed.ip,
        NET.denied.ip,
        NET.wild.ip,
        NET.cidr.ip,
        NET.metadata,
        NET.private,
        ...NET.cloud.map((c) => c.ip),
      ]),
    ];
    sh('ip', ['netns', 'add', netns]);
    sh(
      'ip',
      ['-batch', '-'],
      [
        `link add ${hostDev} type veth peer name eth0 netns ${netns}`,
        `addr add ${host}/30 dev ${hostDev}`,
        `link set ${hostDev} up`,
        '',
      ].join('\n'),
    );
    sh(
      'ip',
      ['-n', netns, '-batch', '-'],
      [
        'link set lo up',
        `addr add ${peer}/30 dev eth0`,
        'link set eth0 up',
        ...addrs.map((a) => `addr add ${a}/32 dev lo`),
        `route add default via ${host}`,
        '',
      ].join('\n'),
    );
    const names = [NET.allowed.name, NET.denied.name, `*.${NET.wild.suffix}`, NET.rebind.name];
    // A CA of its own (what a test tells sandboxd to trust), and the servers' certificate from it.
    const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2'];
    sh('openssl', [
      'req',
      '-x509',
      ...ec,
      '-subj',
      '/CN=fake internet CA',
      '-keyout',
      join(dir, 'ca.key'),
      '-out',
      join(dir, 'ca.crt'),
    ]);
    sh('openssl', [
      'req',
      '-x509',
      ...ec,
      '-CA',
      join(dir, 'ca.crt'),
      '-CAkey',
      join(dir, 'ca.key'),
      '-subj',
      '/CN=fake internet',
      '-addext',
      `subjectAltName=${names.map((x) => `DNS:${x}`).join(',')},IP:${NET.cidr.ip}`,
      '-addext',
      'basicConstraints=critical,CA:FALSE',
      '-addext',
      'extendedKeyUsage=serverAuth',
      '-keyout',
      join(dir, 'key.pem'),
      '-out',
      join(dir, 'cert.pem'),
    ]);
    const cfg = {
      dns: NET.dns,
      records: {
        [NET.allowed.name]: NET.allowed.ip,
        [NET.denied.name]: NET.denied.ip,
        [NET.rebind.name]: NET.rebind.ip,
        ...Object.fromEntries(NET.cloud.map((c) => [c.name, c.ip])),
      },
      wildcards: { [NET.wild.suffix]: NET.wild.ip },
      silent: NET.silent,
      addrs: addrs.filter((a) => a !== NET.dns),
      cert: join(dir, 'cert.pem'),
      key: join(dir, 'key.pem'),
    };
    child = spawn(
      'ip',
      [
        'netns',
        'exec',
        netns,
        process.execPath,
        '--import',
        'tsx',
        'test/e2e/fake-internet-server.ts',
        JSON.stringify(cfg),
      ],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const lines = createInterface({ input: child.stdout! });
    await new Promise<void>((res, rej) => {
      const t = setTimeout(() => rej(new Error('the fake internet did not start in 30 s')), 30_000);
      child!.once('exit', (code) => rej(new Error(`the fake internet exited with ${code}`)));
      lines.on('line', (line) => {
        const o = JSON.parse(line);
        if (o.ready) {
          clearTimeout(t);
          res();
        } else fi.log.push(o);
      });
    });
    return fi;
  } catch (e) {
    await fi.close();
    throw e;
  }
}

/** The host's real uplink: the device of its default route. */
export function uplinkDev(): string {
  const routes = JSON.parse(sh('ip', ['-j', '-4', 'route', 'show', 'default'])) as { dev: string }[];
  if (!routes[0]) throw new Error('the host has no default route');
  return routes[0].dev;
}

/**
 * An nft table of the test's own that counts, and drops, every packet from `subnet` (the
 * sandboxes, and sandboxd's resolver and proxy, which speak from the gateway) leaving by
 * `uplink`, and counts those leaving by `via` (the control: the counting sees the traffic
 * that does flow). Priority -300, before any other table's rules and NAT.
 */
export function watchUplink(tag: string, subnet: string, uplink: string, via: string) {
  const table = `sbxtest_uplink_${tag}`;
  sh(
    'nft',
    ['-f', '-'],
    [
      `table ip ${table} {`,
      '  chain post {',
      '    type filter hook postrouting priority -300; policy accept;',
      `    oifname "${uplink}" ip saddr ${subnet} counter drop comment "uplink"`,
      `    oifname "${via}" ip saddr ${subnet} counter comment "via"`,
      '  }',
      '}',
      '',
    ].join('\n'),
  );
  const counters = (): { uplink: number; via: number } => {
    const out = JSON.parse(sh('nft', ['-j', 'list', 'table', 'ip', table])) as {
      nftables: { rule?: { comment?: string; expr: { counter?: { packets: number } }[] } }[];
    };
    const get = (c: string) =>
      out.nftables.find((x) => x.rule?.comment === c)?.rule?.expr.find((e) => e.counter)?.counter?.packets ?? -1;
    return { uplink: get('uplink'), via: get('via') };
  };
  return {
    counters,
    close: () => {
      try {
        sh('nft', ['delete', 'table', 'ip', table]);
      } catch {
        /* gone */
      }
    },
  };
}
