import { existsSync, readdirSync, statfsSync, writeFileSync } from 'node:fs';
import { unlink } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { SandboxdError } from '@sandboxd/protocol';
import {
  bridgeMac,
  checkIfName,
  checkSandboxId,
  formatPrefix,
  hostVethName,
  instanceGroup,
  intToIp,
  netnsName,
  netnsPath,
  planSubnet,
  type SubnetPlan,
} from './addr.js';
import { keyedLock } from '../../../domain/keyed-lock.js';
import { nativeBin } from '../native.js';
import { attachCommand } from './commands.js';
import { mapLimit, runJson, runTool } from './exec.js';
import { findRouteClash, hostNetworksBesides } from './host.js';
import { blockedPrefixes, buildRuleset, nftTableName } from './rules.js';
import type { Upstream } from './dns.js';
import { EgressGate, type EgressGateOptions } from './egress.js';
import { AddressBook } from './addresses.js';
import { instanceVeths, isInstanceVeth } from './sysfs.js';
import { parseVia, viaRoutingScript, viaRuleDeletions, viaTable } from './via.js';

/**
 * Builds of sandbox networks run one at a time in this process. Nearly all of a build holds
 * the kernel's one rtnl lock (the netns's loopback, the veth pair, routes), and its IPv6
 * sysctl writes only try that lock and restart the write while another holds it: builds at
 * once spun on each other. Measured in a burst of 100 cold creates on 2 cores: a third less
 * CPU for the whole burst and its wall time down from 2.0-2.6 s to 1.4-1.6 s.
 */
const oneBuildAtATime = keyedLock();

/** statfs type of a namespace file (nsfs), e.g. a netns name's bind mount. */
const NSFS_MAGIC = 0x6e736673;

/** Host-side settings of one sandbox network. */
export interface NetworkOptions {
  /**
   * The instance's network name, <= 15 chars, e.g. `sbx0` (config `SANDBOXD_BRIDGE`): the
   * name of its anchor device (a bridge without ports that holds the gateway address) and of
   * its nft table. Owned by this manager: created and removed by it.
   */
  bridge: string;
  /** IPv4 CIDR of the sandboxes, prefix length 8..29; the first host address is the gateway. */
  subnet: string;
  /**
   * Where sandbox egress is routed: an interface (`veth-x`, an on-link route) or an interface
   * and next hop (`veth-x:198.51.100.1`), through a routing table of the instance's own that
   * everything from the subnet uses (sandboxes, and the resolver and proxy, which speak from
   * the gateway). Unset: the host's own routes (its default route).
   */
  via?: string;
  /** Upstream resolvers of the sandboxes' resolver; default the host's resolv.conf nameservers. */
  dnsUpstream?: Upstream[];
  /** Each sandbox's share of the resolver and the proxy (see {@link EgressGateOptions}); default theirs. */
  share?: Pick<EgressGateOptions, 'dnsPendingPerSandbox' | 'proxyConnectionsPerSandbox' | 'proxyIdleTimeoutMs'>;
  /** Secret injection at the proxy: its CA's folder, extra upstream CAs (see {@link EgressGateOptions}). */
  injection?: Pick<EgressGateOptions, 'caDir' | 'extraCa' | 'upstreamPorts'>;
}

/** One sandbox's network as it exists on the host. */
export interface SandboxNet {
  id: string;
  /** `sbx-<id>`, as `ip netns` names it until {@link NetworkManager.settle}. */
  netnsName: string;
  /** `/run/netns/sbx-<id>`: the path crun joins (`linux.namespaces[{type:"network", path}]`). */
  netnsPath: string;
  /** IPv4 address of the sandbox's eth0; '' when `list()` finds a network without one. */
  address: string;
  /** The gateway address (on the anchor device), the sandbox's default route. */
  gateway: string;
}

/** Low priority, so the anchor's own connected route wins while it exists. */
const BLACKHOLE_METRIC = 4294967295;
/**
 * How long a detach waits for the kernel to free a veth whose netns lost its last user
 * (it does so in batches, asynchronously) before deleting it itself.
 */
const VETH_GONE_WAIT_MS = 20_000;

/**
 * Per-sandbox routed networking: a netns per sandbox, joined to the host by a veth pair.
 * The host end has no address and sits in the instance's interface group; a /32 route sends
 * the sandbox's address through it. Nothing is shared between sandboxes on the host side
 * (no bridge port, so no limit on their number but the subnet's), and the firewall is one
 * fixed set of rules for all of them (see rules.ts): a sandbox reaches neither the host nor
 * another sandbox, and a strict reverse-path rule drops any packet whose source address is
 * not routed back through the veth it came in on, so it cannot pose as another sandbox;
 * a MAC means nothing past its own point-to-point link. IPv6 is off on the host veths and
 * inside every netns, and dropped from every sandbox.
 *
 * The instance's name (`bridge`) names its anchor device: a bridge without ports that holds
 * the gateway address (the sandboxes' default route, the source of host-to-sandbox traffic)
 * and, when egress is none, nothing else.
 *
 * Lifecycle of one network: {@link attach} makes it under the netns name `sbx-<id>`;
 * {@link settle} drops that name once the sandbox's processes hold the netns (no host mount
 * stays per sandbox); {@link detach} drops what is left. The kernel frees a netns, its veth
 * pair and the route when the last process in it ends; detach waits for that (or deletes the
 * veth itself after a while) and only then hands the address out again.
 *
 * Concurrency: calls for one id run one after another; different ids run in parallel.
 * Addresses are handed out by this instance from what the host held when it first
 * allocated, plus its own allocations: run one manager per instance name per host.
 */
export class NetworkManager {
  readonly #opts: NetworkOptions;
  readonly #plan: SubnetPlan;
  readonly #subnet: string;
  readonly #gateway: string;
  readonly #group: number;
  #ready = false;
  #loaded: Promise<void> | undefined;
  readonly #addresses: AddressBook;
  readonly #nets = new Map<string, SandboxNet>();
  /** Calls for one id run one after another; different ids in parallel. */
  readonly #locked = keyedLock();
  #netAttachPath: string | undefined;
  #egress: EgressGate | undefined;

  /** Validates the options (`validation` error); touches nothing on the host. */
  constructor(opts: NetworkOptions) {
    checkIfName(opts.bridge);
    if (opts.via !== undefined) parseVia(opts.via);
    this.#opts = { ...opts };
    this.#plan = planSubnet(opts.subnet);
    this.#subnet = formatPrefix(this.#plan.prefix);
    this.#gateway = intToIp(this.#plan.gateway);
    this.#group = instanceGroup(opts.bridge);
    this.#addresses = new AddressBook(this.#plan);
  }

  /**
   * Per-sandbox egress (nft set elements, the resolver, the proxy); exists once `init()`
   * ran. Sandboxes start with `none`.
   */
  get egress(): EgressGate {
    if (!this.#egress) throw new SandboxdError('internal', 'network: init() must run before egress is set');
    return this.#egress;
  }

  /** The interface group of this instance's host veths (and of its anchor device). */
  get group(): number {
    return this.#group;
  }

  /** Path of the net-attach native helper (native/net-attach.c), compiled on first use. */
  #netAttach(): string {
    this.#netAttachPath ??= nativeBin('net-attach');
    return this.#netAttachPath;
  }

  /**
   * Installs the host side, idempotently: the nft table `inet sandboxd_<bridge>` first (so
   * no sandbox ever exists unprotected), then the anchor device (a bridge without ports,
   * with a fixed MAC, in the instance's group, IPv6 off, holding the gateway address), then
   * a blackhole route for the subnet, and the routes of the networks it made (the kernel drops
   * a route with the gateway address), the policy routing of `via`, then starts the egress
   * services (resolver, proxy) and opens the ruleset to them, putting back the egress of the
   * sandboxes it knows. `net.ipv4.ip_forward` is turned on (host-wide; never turned off again)
   * when the first sandbox gets egress. Throws `conflict` when an
   * interface of the anchor's name exists and is not a bridge, or a host route overlaps the
   * subnet.
   */
  async init(): Promise<void> {
    const { bridge } = this.#opts;
    this.#netAttach(); // compiled now, not by the first create
    const clash = await findRouteClash(this.#plan.prefix, (dev) => dev === bridge || isInstanceVeth(dev, this.#group));
    if (clash) throw new SandboxdError('conflict', `network: subnet ${this.#subnet} overlaps the host route ${clash}`);
    const hostNetworks = await hostNetworksBesides(bridge);
    const ruleset = (ports?: Parameters<typeof buildRuleset>[0]['ports']) =>
      buildRuleset({
        name: bridge,
        group: this.#group,
        subnet: this.#subnet,
        gateway: this.#gateway,
        hostNetworks,
        ports,
      });
    // Closed first (no resolver, no proxy yet: DNS and 80/443 are dropped), so no sandbox is ever unprotected.
    await runTool('nft', ['-f', '-'], { input: ruleset() });
    if (!existsSync(`/sys/class/net/${bridge}`)) {
      // A concurrent init may win the race; the check below decides.
      await runTool('ip', ['link', 'add', bridge, 'address', bridgeMac(bridge), 'type', 'bridge'], {
        allowFailure: true,
      });
    }
    if (!existsSync(`/sys/class/net/${bridge}/bridge`)) {
      throw new SandboxdError('conflict', `network: ${bridge} exists and is not a bridge`);
    }
    writeFileSync(`/proc/sys/net/ipv6/conf/${bridge}/disable_ipv6`, '1');
    // Routes whose source is the gateway went with it if the anchor was removed: put back
    // those of the networks this instance made.
    const known = [...this.#nets.values()].filter((n) => existsSync(`/sys/class/net/${hostVethName(n.id)}`));
    const script = [
      `link set ${bridge} group ${this.#group}`,
      `addr replace ${this.#gateway}/${this.#plan.prefix.len} dev ${bridge}`,
      `link set ${bridge} up`,
      `route replace blackhole ${this.#subnet} metric ${BLACKHOLE_METRIC}`,
      ...known.map((n) => `route replace ${n.address}/32 dev ${hostVethName(n.id)} src ${this.#gateway}`),
    ];
    await runTool('ip', ['-batch', '-'], { input: `${script.join('\n')}\n` });
    await this.#routeVia();
    // The resolver and the proxy bind the gateway address, which exists from here on.
    this.#egress ??= new EgressGate({
      table: nftTableName(bridge),
      gateway: this.#gateway,
      blocked: blockedPrefixes(hostNetworks),
      upstream: this.#opts.dnsUpstream,
      ...this.#opts.share,
      ...this.#opts.injection,
    });
    const ports = await this.#egress.start();
    await runTool('nft', ['-f', '-'], { input: ruleset(ports) });
    await this.#egress.reapply();
    this.#ready = true;
  }

  /** Removes the policy routing of `via` (rules, the table's routes); idempotent. */
  async #unrouteVia(): Promise<void> {
    for (const del of viaRuleDeletions(this.#subnet, this.#group)) {
      for (let i = 0; i < 8; i++) if ((await runTool('ip', del, { allowFailure: true })).code !== 0) break;
    }
    await runTool('ip', ['route', 'flush', 'table', String(viaTable(this.#group))], { allowFailure: true });
  }

  /** Stops the egress services (resolver, proxy) of this process; the host side stays. */
  close(): void {
    this.#egress?.close();
  }

  /** The policy routing of `via` (or its removal when unset), idempotently. */
  async #routeVia(): Promise<void> {
    await this.#unrouteVia();
    if (this.#opts.via === undefined) return;
    const via = parseVia(this.#opts.via);
    if (!existsSync(`/sys/class/net/${via.dev}`)) {
      throw new SandboxdError(
        'conflict',
        `network: the egress interface ${via.dev} (SANDBOXD_EGRESS_VIA) does not exist`,
      );
    }
    await runTool('ip', ['-batch', '-'], { input: viaRoutingScript(via, this.#subnet, this.#group) });
  }

  /**
   * Creates netns `sbx-<id>` with eth0 (a free subnet address as a /32, default route via the
   * gateway), lo up and IPv6 off, routed from the host through its own veth. Resolves once
   * crun can join `netnsPath`. With `pid`, the netns is that running process's own (named,
   * not made), for runtimes that create the netns themselves. Throws `validation` (bad id),
   * `conflict` (the id's netns or veth exists), `internal` (not initialised, no free address,
   * a tool failed; nothing is left behind).
   */
  async attach(id: string, opts: { pid?: number } = {}): Promise<SandboxNet> {
    checkSandboxId(id);
    if (!this.#ready) throw new SandboxdError('internal', 'network: init() must run before attach()');
    if (opts.pid !== undefined && !(Number.isSafeInteger(opts.pid) && opts.pid > 1))
      throw new SandboxdError('validation', `network: bad pid ${opts.pid}`);
    return this.#locked(id, () => this.#attach(id, opts.pid));
  }

  /**
   * Drops the netns name of `id` (its bind mount under /run/netns) once a process of the
   * sandbox holds the netns: from then on the netns lives exactly as long as the sandbox's
   * processes, and the host keeps no mount per sandbox (every new mount namespace, each
   * `crun run` included, copies the host's mount table). The veth, route and address stay.
   * Unknown id or no name: no-op.
   */
  async settle(id: string): Promise<void> {
    checkSandboxId(id);
    return this.#locked(id, async () => {
      const path = netnsPath(id);
      let type: number;
      try {
        type = statfsSync(path).type;
      } catch {
        return; // no name
      }
      // Unmounted already (the caller's mount helper run took it with the root layer's
      // mounts, see {@link namePath}): only the file is left. Its unlink waits for the
      // kernel's mount lock, which a burst of creates keeps busy: off the event loop.
      if (type !== NSFS_MAGIC) await unlink(path).catch(() => undefined);
      else await runTool(this.#netAttach(), ['unname', netnsName(id)]);
    });
  }

  /**
   * The netns name of `id` (a bind mount of its namespace under /run/netns), when it exists.
   * A caller that unmounts other things of the sandbox anyway may unmount it in the same
   * run; {@link settle} then only removes the file.
   */
  namePath(id: string): string | undefined {
    checkSandboxId(id);
    const path = netnsPath(id);
    return existsSync(path) ? path : undefined;
  }

  /**
   * Removes the network of `id`: its netns name, then waits until the kernel has freed the
   * veth pair (it does once no process is left in the netns; after a while detach deletes the
   * veth itself), and only then hands its address out again. Unknown id: no-op. Throws
   * `internal` when the veth or the name cannot be removed.
   */
  async detach(id: string): Promise<void> {
    checkSandboxId(id);
    return this.#locked(id, () => this.#remove(id, false));
  }

  /**
   * Every sandbox network of this instance on the host now, read from the host (veths in
   * the instance's group, or ports of its anchor left by an older version, with the alias
   * `sandboxd:<id>`; addresses from their /32 routes), whichever process made them. A netns
   * name without such a veth is not listed.
   */
  async list(): Promise<SandboxNet[]> {
    const veths = instanceVeths(this.#opts.bridge, this.#group);
    const addrByDev = new Map<string, string>();
    if (veths.size > 0) {
      const routes = await runJson<{ dst: string; dev?: string }>(
        'ip',
        ['-j', '-4', 'route', 'show', 'table', 'main'],
        {
          allowFailure: true,
        },
      );
      for (const r of routes) if (r.dev && veths.has(r.dev) && /^[\d.]+$/.test(r.dst)) addrByDev.set(r.dev, r.dst);
    }
    return [...veths]
      .map(([dev, id]) => ({ ...this.#describe(id, addrByDev.get(dev) ?? '') }))
      .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  /**
   * Removes every sandbox network of the instance (without waiting for their processes),
   * then the anchor device, its blackhole route and the nft table. For tests and uninstall;
   * `net.ipv4.ip_forward` stays as it is. Throws `internal` when something is still there
   * afterwards.
   */
  async teardown(): Promise<void> {
    const { bridge } = this.#opts;
    this.#ready = false;
    await mapLimit(await this.list(), 4, (n) => this.#locked(n.id, () => this.#remove(n.id, true)));
    const names = [...instanceVeths(this.#opts.bridge, this.#group).keys()];
    const script = [
      ...names.map((n) => `link del ${n}`),
      `link del ${bridge}`,
      `route del blackhole ${this.#subnet} metric ${BLACKHOLE_METRIC}`,
    ];
    await runTool('ip', ['-force', '-batch', '-'], { input: `${script.join('\n')}\n`, allowFailure: true });
    await runTool('nft', ['delete', 'table', 'inet', nftTableName(bridge)], { allowFailure: true });
    this.#egress?.close();
    this.#egress = undefined;
    await this.#unrouteVia();
    const leftRoute = await runTool('ip', ['route', 'show', 'exact', this.#subnet]);
    const leftTable = await runTool('nft', ['list', 'table', 'inet', nftTableName(bridge)], { allowFailure: true });
    if (existsSync(`/sys/class/net/${bridge}`) || leftRoute.stdout.trim() !== '' || leftTable.code === 0) {
      throw new SandboxdError('internal', `network: teardown of ${bridge} left something behind`);
    }
    this.#loaded = undefined;
    this.#addresses.clear();
    this.#nets.clear();
  }

  /**
   * Networks left for new sandboxes: free subnet addresses (sandboxes being released, and
   * pooled networks, still hold theirs), of all the subnet's. Reads the host once per
   * instance (as attach does).
   */
  async freeAddresses(): Promise<{ free: number; total: number }> {
    if (this.#ready) await this.#loadHostState().catch(() => {});
    return this.#addresses.counts();
  }

  async #attach(id: string, pid?: number): Promise<SandboxNet> {
    const veth = hostVethName(id);
    if (this.#nets.has(id) || existsSync(netnsPath(id)) || existsSync(`/sys/class/net/${veth}`)) {
      throw new SandboxdError('conflict', `network of sandbox ${id} exists`);
    }
    await this.#loadHostState();
    if (!this.#addresses.hasFree()) await this.#recheckHostOnly();
    const net = this.#describe(id, this.#addresses.allocate(id));
    try {
      const cmd = attachCommand({
        id,
        group: this.#group,
        address: net.address,
        gateway: this.#gateway,
        pid,
        helper: this.#netAttach(),
      });
      await oneBuildAtATime('build', () => runTool(cmd.file, cmd.args));
    } catch (e) {
      await this.#remove(id, true).catch(() => {});
      throw e;
    }
    this.#nets.set(id, net);
    return net;
  }

  /**
   * Drops the name, then frees the veth: `now` deletes it at once (the netns may still hold
   * processes: they lose their network); otherwise the kernel's own release is waited for.
   */
  async #remove(id: string, now: boolean): Promise<void> {
    const veth = hostVethName(id);
    // What the address may reach goes before the address can go to another sandbox.
    for (const address of this.#addresses.heldBy(id)) await this.#egress?.release(address);
    const vethPath = `/sys/class/net/${veth}`;
    const script = [
      ...(now && existsSync(vethPath) ? [`link del ${veth}`] : []),
      ...(existsSync(netnsPath(id)) ? [`netns del ${netnsName(id)}`] : []),
    ];
    if (script.length > 0) {
      await runTool('ip', ['-force', '-batch', '-'], { input: `${script.join('\n')}\n`, allowFailure: true });
    }
    if (existsSync(vethPath) && !(await waitGone(vethPath, VETH_GONE_WAIT_MS))) {
      // A process outside the sandbox still holds the netns: the veth goes, the netns is empty.
      await runTool('ip', ['link', 'del', veth], { allowFailure: true });
    }
    if (existsSync(netnsPath(id)) || existsSync(vethPath)) {
      throw new SandboxdError('internal', `network: could not remove the network of sandbox ${id}`);
    }
    this.#nets.delete(id);
    this.#addresses.release(id);
  }

  /**
   * Loads, once per instance, every subnet address the host already uses: /32 routes (of
   * any device; those of this instance's veths under their sandbox's id) and, from an older
   * version's bridged sandboxes, the anchor's permanent neighbour entries.
   */
  #loadHostState(): Promise<void> {
    this.#loaded ??= (async () => {
      const veths = instanceVeths(this.#opts.bridge, this.#group);
      const routes = await runJson<{ dst: string; dev?: string; type?: string }>(
        'ip',
        ['-j', '-4', 'route', 'show', 'table', 'main'],
        { allowFailure: true },
      );
      for (const r of routes) {
        if (r.type === 'blackhole' || !/^[\d.]+(\/32)?$/.test(r.dst)) continue;
        this.#addresses.reserve(r.dst.replace(/\/32$/, ''), (r.dev && veths.get(r.dev)) || '');
      }
      if (existsSync(`/sys/class/net/${this.#opts.bridge}/brif`)) {
        const bridged = readdirSync(`/sys/class/net/${this.#opts.bridge}/brif`).length > 0;
        const neigh = bridged
          ? await runJson<{ dst: string }>(
              'ip',
              ['-j', 'neigh', 'show', 'dev', this.#opts.bridge, 'nud', 'permanent'],
              {
                allowFailure: true,
              },
            )
          : [];
        for (const n of neigh) this.#addresses.reserve(n.dst, '');
      }
    })().catch((e: unknown) => {
      this.#loaded = undefined;
      throw e;
    });
    return this.#loaded;
  }

  /**
   * Frees the addresses that only the host knew about at start whose /32 route is gone
   * since (their sandboxes ended): run when no address is left.
   */
  async #recheckHostOnly(): Promise<void> {
    const routes = await runJson<{ dst: string }>('ip', ['-j', '-4', 'route', 'show', 'table', 'main'], {
      allowFailure: true,
    });
    this.#addresses.pruneHostOnly(new Set(routes.map((r) => r.dst.replace(/\/32$/, ''))));
  }

  /** True while an address of the subnet is free (networks made for the pool hold theirs). */
  hasFreeAddress(): boolean {
    return this.#addresses.hasFree();
  }

  #describe(id: string, address: string): SandboxNet {
    return { id, netnsName: netnsName(id), netnsPath: netnsPath(id), address, gateway: this.#gateway };
  }
}

/** Polls until `path` is gone (true) or `ms` passed (false); backs off from 10 to 200 ms. */
async function waitGone(path: string, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  for (let delay = 10; existsSync(path); delay = Math.min(200, delay * 2)) {
    if (Date.now() > deadline) return false;
    await sleep(delay);
  }
  return true;
}
