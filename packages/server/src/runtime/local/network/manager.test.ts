import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import dgram from 'node:dgram';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { hostVethMac, hostVethName, instanceGroup, netnsName, planSubnet, sandboxMac } from './addr.js';
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
const OPTS: NetworkOptions = { bridge: 'sbxt-net', subnet: '10.89.250.0/24' };
const GATEWAY = '10.89.250.1';
const ids = (prefix: string, n: number): string[] => Array.from({ length: n }, (_, i) => `nt_${prefix}${i}`);
const ALL_IDS = ['nt_a', 'nt_b', 'nt_x', 'nt_y', 'nt_z', 'nt_dup', 'nt_s', 'nt_t', ...ids('c', 20), ...ids('p', 50)];
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

/**
 * The host opens a UDP flow from the gateway to `addr`:9 (conntrack notes it), then a process
 * in netns `ns` sends a datagram from `addr`:9 back to it: 'reply' when the host's socket got
 * it, 'nothing' when it did not (within 500 ms).
 */
async function spoofedReply(ns: string, addr: string): Promise<'reply' | 'nothing'> {
  const sock = dgram.createSocket('udp4');
  await new Promise<void>((r) => sock.bind(0, GATEWAY, () => r()));
  let got = false;
  sock.on('message', () => {
    got = true;
  });
  try {
    const port = sock.address().port;
    await new Promise<void>((r) => sock.send('open', 9, addr, () => r()));
    const js = `const s = require('dgram').createSocket('udp4'); s.bind(9, '${addr}', () => s.send('x', ${port}, '${GATEWAY}', () => s.close()));`;
    execFileSync('ip', ['netns', 'exec', ns, 'node', '-e', js], { timeout: 10_000 });
    for (let i = 0; i < 10 && !got; i++) await sleep(50);
    return got ? 'reply' : 'nothing';
  } finally {
    sock.close();
  }
}

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
    // Nothing at layer 2 is shared: a cannot even resolve b's MAC (its eth0 is a /32 whose
    // only neighbour is the gateway).
    assert.doesNotMatch(sh(`ip -n ${a.netnsName} neigh show ${b.address}`), /lladdr/);
    assert.throws(() => sh(`ip netns exec ${a.netnsName} busybox ping -c1 -W1 ${GATEWAY} 2>&1`));

    // a takes b's MAC and address and sends frames with them: the host still reaches b.
    sh(`ip -n ${a.netnsName} link set eth0 address ${sandboxMac('nt_b')}`);
    sh(`ip -n ${a.netnsName} addr add ${b.address}/32 dev eth0`);
    assert.notEqual(await probeFromNetns(a.netnsName, GATEWAY, portOf(v4)), 'open');
    assert.equal(await probeFromHost(b.address, 8000), 'open', 'a sandbox hijacked another one');
    // With b's address, a answers a UDP flow the host opened towards b: conntrack alone would
    // take it for b's reply; the reverse-path rule drops it (b's address is routed via b's veth).
    assert.equal(await spoofedReply(a.netnsName, b.address), 'nothing', 'the host took a spoofed reply');
    sh(`ip -n ${a.netnsName} addr del ${b.address}/32 dev eth0`);
    sh(`ip -n ${a.netnsName} link set eth0 address ${sandboxMac('nt_a')}`);
    // Control: the same reply from b itself arrives.
    assert.equal(await spoofedReply(b.netnsName, b.address), 'reply', 'the reply path itself works');

    // IPv6 is off on the anchor, the host veth and inside the netns.
    assert.equal(sh(`cat /proc/sys/net/ipv6/conf/${OPTS.bridge}/disable_ipv6`).trim(), '1');
    assert.equal(sh(`cat /proc/sys/net/ipv6/conf/${hostVethName('nt_a')}/disable_ipv6`).trim(), '1');
    for (const conf of ['all', 'default', 'eth0', 'lo'])
      assert.equal(
        sh(`ip netns exec ${a.netnsName} cat /proc/sys/net/ipv6/conf/${conf}/disable_ipv6`).trim(),
        '1',
        conf,
      );
    assert.equal(sh(`ip -n ${a.netnsName} -6 addr show`).trim(), '');

    // Even with IPv6 turned back on at both ends, the firewall drops all IPv6 from the sandbox:
    // neither its connections to the host nor its replies to the host's get through.
    const veth = hostVethName('nt_a');
    writeFileSync(`/proc/sys/net/ipv6/conf/${veth}/disable_ipv6`, '0');
    try {
      sh(`ip addr add fe80::1/64 dev ${veth} nodad`);
      sh(`ip netns exec ${a.netnsName} sysctl -qw net.ipv6.conf.all.disable_ipv6=0`);
      sh(`ip netns exec ${a.netnsName} sysctl -qw net.ipv6.conf.eth0.disable_ipv6=0`);
      sh(`ip -n ${a.netnsName} addr add fe80::a/64 dev eth0 nodad`);
      // Static entries at both ends: nothing but the firewall stands between them.
      sh(`ip -6 neigh replace fe80::a lladdr ${sandboxMac('nt_a')} dev ${veth} nud permanent`);
      sh(`ip -n ${a.netnsName} -6 neigh replace fe80::1 lladdr ${hostVethMac('nt_a')} dev eth0 nud permanent`);
      await listenInNetns(a.netnsName, '::', 8001);
      const r6 = await probeFromNetns(a.netnsName, 'fe80::1%eth0', portOf(v6));
      assert.match(r6, PROBE_OK);
      assert.notEqual(r6, 'open', 'sandbox reached the host over IPv6 link-local');
      assert.notEqual(await probeFromHost(`fe80::a%${veth}`, 8001), 'open', 'IPv6 replies from a sandbox pass');
      // Control: without this instance's table the same path is open, so the rules are what closed it.
      sh(`nft delete table inet sandboxd_${OPTS.bridge}`);
      try {
        assert.equal(await probeFromHost(`fe80::a%${veth}`, 8001), 'open', 'the IPv6 path itself works');
      } finally {
        await nm.init();
      }
    } finally {
      writeFileSync(`/proc/sys/net/ipv6/conf/${veth}/disable_ipv6`, '1');
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
      assert.equal(sh(`ip -n ${n.netnsName} -4 -o addr show dev eth0`).split(/\s+/)[3], `${n.address}/32`);
      assert.match(sh(`ip route show ${n.address}`), new RegExp(`dev ${hostVethName(n.id)} .*src ${GATEWAY}`));
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
    const routes = sh('ip -4 route show table main');
    for (const id of [...ids('c', 20), 'nt_dup']) {
      assert.ok(!existsSync(`/run/netns/${netnsName(id)}`), `netns of ${id} left`);
      assert.ok(!existsSync(`/sys/class/net/${hostVethName(id)}`), `veth of ${id} left`);
      assert.ok(!routes.includes(hostVethName(id)), `route of ${id} left`);
    }
    assert.deepEqual(await nm.list(), []);
  });

  it('has no per-port limit: no sandbox is a bridge port and the ruleset does not grow', async (t) => {
    const some = ids('c', 12);
    t.after(() => Promise.all(some.map((id) => nm.detach(id))));
    const rules = sh(`nft list table inet sandboxd_${OPTS.bridge}`);
    const nets = await Promise.all(some.map((id) => nm.attach(id)));
    // Each veth stands alone (no master device, so no bridge's 1,024-port cap), in the group.
    for (const n of nets) {
      const veth = hostVethName(n.id);
      assert.ok(!existsSync(`/sys/class/net/${veth}/master`), `${veth} is enslaved`);
      assert.equal(sh(`cat /sys/class/net/${veth}/netdev_group`).trim(), String(instanceGroup(OPTS.bridge)));
    }
    assert.deepEqual(readdirSync(`/sys/class/net/${OPTS.bridge}/brif`), [], 'the anchor has ports');
    assert.equal(sh(`nft list table inet sandboxd_${OPTS.bridge}`), rules, 'the ruleset changed with the sandboxes');
    assert.deepEqual(await nm.freeAddresses(), { free: 253 - nets.length, total: 253 });
    // Only the subnet bounds the count: a /16 holds 65,533 sandboxes.
    const big = planSubnet('10.80.0.0/16');
    assert.equal(big.last - big.first + 1, 65_533);
  });

  it('settle() drops the netns name, the network lives on with its process; detach waits for the kernel', async (t) => {
    t.after(() => nm.detach('nt_s'));
    const s1 = await nm.attach('nt_s');
    const mounts = () => readFileSync('/proc/self/mountinfo', 'utf8').includes(`/run/netns/${s1.netnsName}`);
    assert.ok(mounts(), 'the netns name is a mount until settled');
    const holder = await listenInNetns(s1.netnsName, '0.0.0.0', 8002);
    await nm.settle('nt_s');
    await nm.settle('nt_s'); // idempotent
    assert.ok(!existsSync(s1.netnsPath) && !mounts(), 'the name is gone');
    assert.equal(await probeFromHost(s1.address, 8002), 'open', 'the network still works');
    assert.deepEqual(
      (await nm.list()).find((n) => n.id === 'nt_s'),
      s1,
      'listed from its veth and route alone',
    );
    const fresh = new NetworkManager(OPTS);
    t.after(() => fresh.close());
    await fresh.init();
    assert.notEqual((await fresh.attach('nt_t')).address, s1.address, 'a new instance reused a settled address');
    await fresh.detach('nt_t');
    // detach resolves only once the kernel freed the veth (here: after its last process ended).
    const done = nm.detach('nt_s');
    await sleep(300);
    assert.ok(existsSync(`/sys/class/net/${hostVethName('nt_s')}`), 'the veth went while its process lived');
    process.kill(holder.pid!, 'SIGKILL');
    await done;
    assert.ok(!existsSync(`/sys/class/net/${hostVethName('nt_s')}`));
    assert.doesNotMatch(sh('ip -4 route show table main'), new RegExp(hostVethName('nt_s')));
  });

  it('lets a new instance find the existing networks and never reuse their addresses', async (t) => {
    t.after(() => Promise.all(['nt_x', 'nt_y', 'nt_z'].map((id) => nm.detach(id))));
    // A new instance starts at the bottom of the pool, where x and y sit: only reading the
    // host keeps it from handing out their addresses again.
    const first = new NetworkManager(OPTS);
    t.after(() => first.close());
    await first.init();
    const x = await first.attach('nt_x');
    const y = await first.attach('nt_y');
    assert.deepEqual([x.address, y.address], ['10.89.250.2', '10.89.250.3']);
    const fresh = new NetworkManager(OPTS);
    t.after(() => fresh.close());
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
    });
    await assert.rejects(clashing.init(), { kind: 'conflict' });
    assert.ok(!existsSync('/sys/class/net/sbxt-ovl'));
    assert.doesNotMatch(sh('nft list tables'), /sandboxd_sbxt-ovl/);
    assert.throws(() => new NetworkManager({ ...OPTS, subnet: '10.89.250.0/31' }), { kind: 'validation' });
    assert.throws(() => new NetworkManager({ ...OPTS, bridge: 'a-much-too-long-name' }), { kind: 'validation' });
  });

  it('renders a valid ruleset that never forwards to private or host networks', async () => {
    const rules = buildRuleset({
      name: OPTS.bridge,
      group: instanceGroup(OPTS.bridge),
      subnet: '10.89.250.0/24',
      gateway: '10.89.250.1',
      ports: { dnsUdp: 40001, dnsTcp: 40002, http: 40003, tls: 40004 },
      hostNetworks: [{ base: 0xc0000200, len: 24 }],
    });
    assert.match(rules, /masquerade/);
    assert.match(rules, /10\.0\.0\.0\/8/);
    assert.match(rules, /192\.0\.2\.0\/24/);
    assert.match(rules, /fib saddr \. iif oif missing drop/);
    // `nft -c` only checks the script; nothing is applied.
    await runTool('nft', ['-c', '-f', '-'], { input: rules });
  });

  it('init() is idempotent, a removed anchor leaks nothing, teardown() restores the host', async () => {
    const g = instanceGroup(OPTS.bridge);
    await nm.init(); // the table with this manager's resolver and proxy ports (another instance ran init since)
    const table = sh(`nft list table inet sandboxd_${OPTS.bridge}`);
    assert.match(table, new RegExp(`iifgroup ${g} drop`));
    assert.match(table, new RegExp(`iifgroup ${g} fib saddr \\. iif oif missing drop`));
    await nm.init();
    await nm.init();
    assert.equal(sh(`nft list table inet sandboxd_${OPTS.bridge}`), table);
    assert.equal(sh(`ip -o -4 addr show dev ${OPTS.bridge}`).trim().split('\n').length, 1);
    assert.equal(sh(`ip route show type blackhole`).match(/10\.89\.250\.0\/24/g)?.length, 1);

    const a = await nm.attach('nt_a');
    sh(`ip link del ${OPTS.bridge}`);
    // Addresses of no sandbox hit the blackhole route, never the default route.
    assert.equal(await probeFromHost('10.89.250.200', 8000), 'EINVAL', 'blackhole route missing');
    // A failed attach (here: no gateway address on the host) leaves nothing of its id behind.
    await assert.rejects(nm.attach('nt_b'), { kind: 'internal' });
    assert.ok(!existsSync(`/run/netns/${netnsName('nt_b')}`) && !existsSync(`/sys/class/net/${hostVethName('nt_b')}`));
    await nm.init(); // repairs the host side, the routes of its sandboxes included
    assert.deepEqual(await nm.list(), [a]);
    await nm.detach('nt_a');

    await nm.attach('nt_b');
    await nm.teardown();
    assert.ok(!existsSync(`/run/netns/${netnsName('nt_b')}`));
    await nm.teardown(); // idempotent
    // Only this file's lines: other instances on the host come and go meanwhile.
    const ours = (l: string) =>
      l.includes(OPTS.bridge) || l.includes('10.89.250.') || /\b(sbx-nt_|sv[0-9a-f]{10})/.test(l);
    assert.deepEqual(hostNetSnapshot((n) => MINE.has(n)).filter(ours), snapshotBefore.filter(ours));
  });
});
