import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { hostVethName, netnsName, sandboxMac } from './addr.js';
import { runTool } from './exec.js';
import {
  hostNetSnapshot,
  killStartedChildren,
  listenInNetns,
  probeFromHost,
  probeFromNetns,
} from '../../../../test/network-probe.js';
import { buildRuleset } from './rules.js';
import { NetworkManager, type NetworkOptions } from './manager.js';

// Names and addresses no one else uses; every sandbox id of this file starts with `nt_`.
const OPTS: NetworkOptions = { bridge: 'sbxt-net', subnet: '10.89.250.0/24', egress: 'none' };
const GATEWAY = '10.89.250.1';
const ids = (prefix: string, n: number): string[] => Array.from({ length: n }, (_, i) => `nt_${prefix}${i}`);
const ALL_IDS = ['nt_a', 'nt_b', 'nt_x', 'nt_y', 'nt_z', 'nt_dup', ...ids('c', 20), ...ids('p', 50)];
const MINE = new Set(ALL_IDS.flatMap((id) => [netnsName(id), hostVethName(id)]));
const sh = (cmd: string): string => execFileSync('sh', ['-c', cmd], { encoding: 'utf8' });
const PROBE_OK = /^(open|timeout|E[A-Z]+)$/;

/** Removes whatever an earlier, killed run of this file left: only this file's names. */
async function cleanUp(): Promise<void> {
  killStartedChildren();
  await new NetworkManager(OPTS).teardown();
  for (const id of ALL_IDS) {
    if (existsSync(`/run/netns/${netnsName(id)}`))
      await runTool('ip', ['netns', 'del', netnsName(id)], { allowFailure: true });
  }
}

function hostListener(host: string, ipv6Only = false): Promise<net.Server> {
  return new Promise((resolve, reject) => {
    const server = net.createServer((c) => c.on('error', () => {}).end('host\n'));
    server.once('error', reject);
    server.listen({ host, port: 0, ipv6Only }, () => resolve(server));
  });
}
const portOf = (s: net.Server): number => (s.address() as net.AddressInfo).port;

describe('NetworkManager (real kernel objects)', () => {
  let nm: NetworkManager;
  let snapshotBefore: string[];
  const servers: net.Server[] = [];

  before(async () => {
    await cleanUp();
    snapshotBefore = hostNetSnapshot((n) => MINE.has(n));
    nm = new NetworkManager(OPTS);
    await nm.init();
  });

  after(async () => {
    for (const s of servers) s.close();
    await cleanUp();
  });

  it('isolates sandboxes from each other and from every host service, over IPv4 and IPv6', async (t) => {
    t.after(() => Promise.all([nm.detach('nt_a'), nm.detach('nt_b')]));
    const a = await nm.attach('nt_a');
    const b = await nm.attach('nt_b');
    assert.notEqual(a.address, b.address);
    assert.equal(a.netnsPath, '/run/netns/sbx-nt_a');
    const v4 = await hostListener('0.0.0.0');
    const v6 = await hostListener('::', true);
    servers.push(v4, v6);
    // The host's own address on its main interface (eth0 here), as a sandbox would try it.
    const hostAddr: string = JSON.parse(sh('ip -j -4 addr show scope global')).find(
      (l: { ifname: string }) => l.ifname !== OPTS.bridge,
    ).addr_info[0].local;
    await listenInNetns(b.netnsName, '0.0.0.0', 8000);

    // Controls: the probes, the listeners and the host -> sandbox path all work.
    assert.equal(await probeFromNetns(b.netnsName, '127.0.0.1', 8000), 'open');
    assert.equal(await probeFromHost(b.address, 8000), 'open');
    assert.equal(await probeFromHost(GATEWAY, portOf(v4)), 'open');
    sh(`busybox ping -c1 -W1 ${a.address}`);

    const blocked: [string, number][] = [
      [b.address, 8000],
      [GATEWAY, portOf(v4)],
      [GATEWAY, 2024],
      [hostAddr, portOf(v4)],
      [hostAddr, 2024],
    ];
    const results = await Promise.all(blocked.map(([h, p]) => probeFromNetns(a.netnsName, h, p)));
    results.forEach((r, i) => {
      assert.match(r, PROBE_OK);
      assert.notEqual(r, 'open', `sandbox a reached ${blocked[i].join(':')}`);
    });
    // Layer 2 isolation itself (the forward rule blocks IP between ports too, when
    // br_netfilter is on): a cannot even resolve b's MAC.
    assert.doesNotMatch(sh(`ip -n ${a.netnsName} neigh show ${b.address}`), /lladdr/);
    assert.throws(() => sh(`ip netns exec ${a.netnsName} busybox ping -c1 -W1 ${GATEWAY} 2>&1`));

    // a takes b's MAC and address and sends frames with them: the host still reaches b.
    sh(`ip -n ${a.netnsName} link set eth0 address ${sandboxMac('nt_b')}`);
    sh(`ip -n ${a.netnsName} addr add ${b.address}/24 dev eth0`);
    assert.notEqual(await probeFromNetns(a.netnsName, GATEWAY, portOf(v4)), 'open');
    assert.equal(await probeFromHost(b.address, 8000), 'open', 'a sandbox hijacked another one');
    sh(`ip -n ${a.netnsName} addr del ${b.address}/24 dev eth0`);
    sh(`ip -n ${a.netnsName} link set eth0 address ${sandboxMac('nt_a')}`);

    // IPv6 is off on the bridge and inside the netns.
    assert.equal(sh(`cat /proc/sys/net/ipv6/conf/${OPTS.bridge}/disable_ipv6`).trim(), '1');
    assert.equal(sh(`ip netns exec ${a.netnsName} cat /proc/sys/net/ipv6/conf/all/disable_ipv6`).trim(), '1');
    assert.equal(sh(`ip -n ${a.netnsName} -6 addr show`).trim(), '');

    // Even with IPv6 turned back on at both ends, the nft input rule keeps the host closed.
    writeFileSync(`/proc/sys/net/ipv6/conf/${OPTS.bridge}/disable_ipv6`, '0');
    try {
      sh(`ip addr add fe80::1/64 dev ${OPTS.bridge} nodad`);
      sh(`ip netns exec ${a.netnsName} sysctl -qw net.ipv6.conf.all.disable_ipv6=0`);
      sh(`ip -n ${a.netnsName} addr add fe80::a/64 dev eth0 nodad`);
      // The input rule also drops neighbour discovery from sandboxes; static entries at both
      // ends leave the nft rule as the only thing between the sandbox and the host.
      sh(`ip -6 neigh replace fe80::a lladdr ${sandboxMac('nt_a')} dev ${OPTS.bridge} nud permanent`);
      const bridgeMac = sh(`cat /sys/class/net/${OPTS.bridge}/address`).trim();
      sh(`ip -n ${a.netnsName} -6 neigh replace fe80::1 lladdr ${bridgeMac} dev eth0 nud permanent`);
      await listenInNetns(a.netnsName, '::', 8001);
      assert.equal(await probeFromHost(`fe80::a%${OPTS.bridge}`, 8001), 'open', 'host -> sandbox over IPv6');
      const r6 = await probeFromNetns(a.netnsName, 'fe80::1%eth0', portOf(v6));
      assert.match(r6, PROBE_OK);
      assert.notEqual(r6, 'open', 'sandbox reached the host over IPv6 link-local');
    } finally {
      writeFileSync(`/proc/sys/net/ipv6/conf/${OPTS.bridge}/disable_ipv6`, '1');
    }
  });

  it('gives 20 concurrent attaches 20 distinct addresses; detach leaves nothing', async (t) => {
    t.after(() => Promise.all([...ids('c', 20), 'nt_dup'].map((id) => nm.detach(id))));
    const nets = await Promise.all(ids('c', 20).map((id) => nm.attach(id)));
    const addrs = new Set(nets.map((n) => n.address));
    assert.equal(addrs.size, 20);
    for (const n of nets) {
      assert.match(n.address, /^10\.89\.250\.\d+$/);
      assert.notEqual(n.address, GATEWAY);
      assert.equal(sh(`ip -n ${n.netnsName} -4 -o addr show dev eth0`).split(/\s+/)[3], `${n.address}/24`);
    }
    const listed = await nm.list();
    assert.deepEqual(
      listed
        .filter((n) => n.id.startsWith('nt_c'))
        .map((n) => n.address)
        .sort(),
      [...addrs].sort(),
    );

    await assert.rejects(Promise.all([nm.attach('nt_dup'), nm.attach('nt_dup')]), { kind: 'conflict' });
    await Promise.all([...ids('c', 20), 'nt_dup'].map((id) => nm.detach(id)));
    await nm.detach('nt_c0'); // idempotent
    const fdb = sh(`bridge fdb show br ${OPTS.bridge}`);
    const neigh = sh(`ip neigh show dev ${OPTS.bridge} nud permanent`);
    for (const id of [...ids('c', 20), 'nt_dup']) {
      assert.ok(!existsSync(`/run/netns/${netnsName(id)}`), `netns of ${id} left`);
      assert.ok(!existsSync(`/sys/class/net/${hostVethName(id)}`), `veth of ${id} left`);
      assert.ok(!fdb.includes(sandboxMac(id)), `fdb entry of ${id} left`);
    }
    for (const n of nets) assert.ok(!neigh.includes(`${n.address} `), `neighbour entry of ${n.id} left`);
    assert.deepEqual(await nm.list(), []);
  });

  it('lets a new instance find the existing networks and never reuse their addresses', async (t) => {
    t.after(() => Promise.all(['nt_x', 'nt_y', 'nt_z'].map((id) => nm.detach(id))));
    // A new instance starts at the bottom of the pool, where x and y sit: only reading the
    // host keeps it from handing out their addresses again.
    const first = new NetworkManager(OPTS);
    await first.init();
    const x = await first.attach('nt_x');
    const y = await first.attach('nt_y');
    assert.deepEqual([x.address, y.address], ['10.89.250.2', '10.89.250.3']);
    const fresh = new NetworkManager(OPTS);
    assert.deepEqual(await fresh.list(), [x, y]);
    await fresh.init();
    const z = await fresh.attach('nt_z');
    assert.ok(![x.address, y.address].includes(z.address), `address ${z.address} handed out twice`);
    await assert.rejects(fresh.attach('nt_x'), { kind: 'conflict' });
    await assert.rejects(fresh.attach('Bad-Id'), { kind: 'validation' });
    for (const id of ['nt_x', 'nt_y', 'nt_z']) await fresh.detach(id);
    assert.deepEqual(await nm.list(), []);
  });

  it('50 sequential attach/detach cycles leave nothing behind (times printed, not asserted)', async (t) => {
    const attachMs: number[] = [];
    const detachMs: number[] = [];
    for (const id of ids('p', 50)) {
      let t0 = performance.now();
      await nm.attach(id);
      attachMs.push(performance.now() - t0);
      t0 = performance.now();
      await nm.detach(id);
      detachMs.push(performance.now() - t0);
    }
    const median = (v: number[]): number => [...v].sort((p, q) => p - q)[v.length >> 1];
    t.diagnostic(`attach median ${median(attachMs).toFixed(1)} ms, detach median ${median(detachMs).toFixed(1)} ms`);
    // Tests never assert on timing (bench/ measures); what must hold is that nothing is left.
    assert.deepEqual(await nm.list(), []);
  });

  it('refuses a subnet the host already routes, before touching anything', async () => {
    const own = JSON.parse(sh('ip -j -4 addr show scope global')).find(
      (l: { ifname: string }) => l.ifname !== OPTS.bridge,
    ).addr_info[0];
    const clashing = new NetworkManager({
      bridge: 'sbxt-ovl',
      subnet: `${own.local}/${own.prefixlen}`,
      egress: 'none',
    });
    await assert.rejects(clashing.init(), { kind: 'conflict' });
    assert.ok(!existsSync('/sys/class/net/sbxt-ovl'));
    assert.doesNotMatch(sh('nft list tables'), /sandboxd_sbxt-ovl/);
    assert.throws(() => new NetworkManager({ ...OPTS, subnet: '10.89.250.0/31' }), { kind: 'validation' });
    assert.throws(() => new NetworkManager({ ...OPTS, bridge: 'a-much-too-long-name' }), { kind: 'validation' });
  });

  it('renders a valid NAT ruleset that never forwards to private or host networks', async () => {
    const rules = buildRuleset({
      ...OPTS,
      subnet: '10.89.250.0/24',
      egress: 'nat',
      hostNetworks: [{ base: 0xc0000200, len: 24 }],
    });
    assert.match(rules, /masquerade/);
    assert.match(rules, /10\.0\.0\.0\/8/);
    assert.match(rules, /192\.0\.2\.0\/24/);
    // `nft -c` only checks the script; nothing is applied.
    await runTool('nft', ['-c', '-f', '-'], { input: rules });
  });

  it('init() is idempotent, a removed bridge leaks nothing, teardown() restores the host', async () => {
    const table = sh(`nft list table inet sandboxd_${OPTS.bridge}`);
    assert.match(table, /iifname "sbxt-net" drop/);
    await nm.init();
    await nm.init();
    assert.equal(sh(`nft list table inet sandboxd_${OPTS.bridge}`), table);
    assert.equal(sh(`ip -o -4 addr show dev ${OPTS.bridge}`).trim().split('\n').length, 1);
    assert.equal(sh(`ip route show type blackhole`).match(/10\.89\.250\.0\/24/g)?.length, 1);

    const a = await nm.attach('nt_a');
    sh(`ip link del ${OPTS.bridge}`);
    assert.equal(await probeFromHost(a.address, 8000), 'EINVAL', 'blackhole route missing');
    // A failed attach (here: no bridge) leaves nothing of its id behind.
    await assert.rejects(nm.attach('nt_b'), { kind: 'internal' });
    assert.ok(!existsSync(`/run/netns/${netnsName('nt_b')}`) && !existsSync(`/sys/class/net/${hostVethName('nt_b')}`));
    await nm.init(); // repairs the host side
    assert.deepEqual(await nm.list(), [], 'a netns whose veth is not on the bridge is not listed');
    await nm.detach('nt_a');

    await nm.attach('nt_b');
    await nm.teardown();
    assert.ok(!existsSync(`/run/netns/${netnsName('nt_b')}`));
    await nm.teardown(); // idempotent
    assert.deepEqual(
      hostNetSnapshot((n) => MINE.has(n)),
      snapshotBefore,
    );
  });
});
