import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { SandboxdError } from '@sandboxd/protocol';
import {
  bridgeMac,
  checkIfName,
  checkSandboxId,
  contains,
  formatPrefix,
  hostVethName,
  intToIp,
  ipToInt,
  netnsName,
  netnsPath,
  planSubnet,
  SANDBOX_ID_RE,
  sandboxMac,
  type SubnetPlan,
} from './addr.js';
import { attachCommand } from './commands.js';
import { mapLimit, runJson, runTool } from './exec.js';
import { findRouteClash, hostNetworksBesides } from './host.js';
import { buildRuleset, nftTableName } from './rules.js';

/** Host-side settings of one sandbox network. */
export interface NetworkOptions {
  /** Bridge name, <= 15 chars, e.g. `sbx0`. Owned by this manager: created and removed by it. */
  bridge: string;
  /** IPv4 CIDR of the sandboxes, prefix length 8..29; the first host address is the gateway on the bridge. */
  subnet: string;
  /** `none`: sandboxes reach nothing but their own netns. `nat`: masqueraded egress to public addresses only. */
  egress: 'none' | 'nat';
}

/** One sandbox's network as it exists on the host. */
export interface SandboxNet {
  id: string;
  /** `sbx-<id>`, as `ip netns` names it. */
  netnsName: string;
  /** `/run/netns/sbx-<id>`: the path crun joins (`linux.namespaces[{type:"network", path}]`). */
  netnsPath: string;
  /** IPv4 address of the sandbox's eth0; '' when `list()` finds a half-made network without one. */
  address: string;
  /** The bridge address, the sandbox's default route. */
  gateway: string;
}

/** Low priority, so the bridge's own connected route wins while the bridge exists. */
const BLACKHOLE_METRIC = 4294967295;
const NETNS_DIR = '/run/netns';
/**
 * Per-sandbox networking on one host bridge: a netns per sandbox, joined to the bridge by a
 * veth pair whose host port is isolated (no sandbox-to-sandbox traffic), learns nothing and
 * floods nothing (the host reaches each sandbox through a static FDB entry and a permanent
 * neighbour entry, so a sandbox cannot claim another's MAC or IPv4 address towards the host).
 * IPv6 is off on the bridge, the host ports and inside every netns.
 *
 * Concurrency: calls for one id run one after another; different ids run in parallel.
 * Addresses are handed out by this instance from what the host held when it first
 * allocated, plus its own allocations: run one manager per bridge per host.
 */
export class NetworkManager {
  readonly #opts: NetworkOptions;
  readonly #plan: SubnetPlan;
  readonly #subnet: string;
  readonly #gateway: string;
  #ready = false;
  #loaded: Promise<void> | undefined;
  /** Address (as number) -> id using it ('' for an address only the host knows about). */
  readonly #used = new Map<number, string>();
  readonly #nets = new Map<string, SandboxNet>();
  readonly #locks = new Map<string, Promise<unknown>>();
  #cursor: number;

  /** Validates the options (`validation` error); touches nothing on the host. */
  constructor(opts: NetworkOptions) {
    checkIfName(opts.bridge);
    if (opts.egress !== 'none' && opts.egress !== 'nat') {
      throw new SandboxdError('validation', `network egress must be 'none' or 'nat', not ${String(opts.egress)}`);
    }
    this.#opts = { ...opts };
    this.#plan = planSubnet(opts.subnet);
    this.#subnet = formatPrefix(this.#plan.prefix);
    this.#gateway = intToIp(this.#plan.gateway);
    this.#cursor = this.#plan.first;
  }

  /**
   * Installs the host side, idempotently: the nft table `inet sandboxd_<bridge>` first (so
   * no sandbox ever exists unprotected), then the bridge with a fixed MAC, IPv6 off and the
   * gateway address, then a blackhole route for the subnet. With egress 'nat' it also turns
   * on `net.ipv4.ip_forward` (host-wide; never turned off again); with 'none' it leaves it.
   * Throws `conflict` when an interface of the bridge's name exists and is not a bridge.
   */
  async init(): Promise<void> {
    const { bridge, egress } = this.#opts;
    const clash = await findRouteClash(this.#plan.prefix, bridge);
    if (clash) throw new SandboxdError('conflict', `network: subnet ${this.#subnet} overlaps the host route ${clash}`);
    const hostNetworks = egress === 'nat' ? await hostNetworksBesides(bridge) : [];
    const rules = buildRuleset({ bridge, subnet: this.#subnet, egress, hostNetworks });
    await runTool('nft', ['-f', '-'], { input: rules });
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
    const script = [
      `addr replace ${this.#gateway}/${this.#plan.prefix.len} dev ${bridge}`,
      `link set ${bridge} up`,
      `route replace blackhole ${this.#subnet} metric ${BLACKHOLE_METRIC}`,
    ];
    await runTool('ip', ['-batch', '-'], { input: `${script.join('\n')}\n` });
    if (egress === 'nat' && readFileSync('/proc/sys/net/ipv4/ip_forward', 'utf8').trim() !== '1') {
      writeFileSync('/proc/sys/net/ipv4/ip_forward', '1');
    }
    this.#ready = true;
  }

  /**
   * Creates netns `sbx-<id>` with eth0 (a free subnet address, default route via the
   * gateway), lo up and IPv6 off, joined to the bridge. Resolves once crun can join
   * `netnsPath`. With `pid`, the netns is that running process's own (named, not made), for
   * runtimes that create the netns themselves. Throws `validation` (bad id), `conflict`
   * (the id's netns or port exists), `internal` (not initialised, pool exhausted, a tool
   * failed; nothing is left behind).
   */
  async attach(id: string, opts: { pid?: number } = {}): Promise<SandboxNet> {
    checkSandboxId(id);
    if (!this.#ready) throw new SandboxdError('internal', 'network: init() must run before attach()');
    if (opts.pid !== undefined && !(Number.isSafeInteger(opts.pid) && opts.pid > 1))
      throw new SandboxdError('validation', `network: bad pid ${opts.pid}`);
    return this.#locked(id, () => this.#attach(id, opts.pid));
  }

  /** Removes the netns, veth pair, FDB and neighbour entries of `id`. Unknown id: no-op. */
  async detach(id: string): Promise<void> {
    checkSandboxId(id);
    return this.#locked(id, () => this.#remove(id));
  }

  /**
   * Every sandbox network of this bridge on the host now, read from the host (netns files
   * whose veth is a port of the bridge, the address from inside each netns), whichever
   * process made them.
   */
  async list(): Promise<SandboxNet[]> {
    const { bridge } = this.#opts;
    const ports = await runJson<{ ifname: string }>('ip', ['-j', 'link', 'show', 'master', bridge], {
      allowFailure: true,
    });
    const portNames = new Set(ports.map((p) => p.ifname));
    let names: string[] = [];
    try {
      names = readdirSync(NETNS_DIR);
    } catch {
      // No netns was ever made on this host.
    }
    const ids = names
      .filter((n) => n.startsWith('sbx-'))
      .map((n) => n.slice(4))
      .filter((id) => SANDBOX_ID_RE.test(id) && portNames.has(hostVethName(id)));
    return mapLimit(ids.sort(), 8, async (id) => ({ ...this.#describe(id, ''), address: await this.#readAddress(id) }));
  }

  /**
   * Detaches every sandbox of the bridge, then removes the bridge, its blackhole route and
   * the nft table. For tests and uninstall; `net.ipv4.ip_forward` stays as it is.
   * Throws `internal` when something is still there afterwards.
   */
  async teardown(): Promise<void> {
    const { bridge } = this.#opts;
    this.#ready = false;
    await mapLimit(await this.list(), 4, (n) => this.detach(n.id));
    const ports = await runJson<{ ifname: string }>('ip', ['-j', 'link', 'show', 'master', bridge], {
      allowFailure: true,
    });
    const script = [
      ...ports.filter((p) => /^sv[0-9a-f]{10}$/.test(p.ifname)).map((p) => `link del ${p.ifname}`),
      `link del ${bridge}`,
      `route del blackhole ${this.#subnet} metric ${BLACKHOLE_METRIC}`,
    ];
    await runTool('ip', ['-force', '-batch', '-'], { input: `${script.join('\n')}\n`, allowFailure: true });
    await runTool('nft', ['delete', 'table', 'inet', nftTableName(bridge)], { allowFailure: true });
    const leftRoute = await runTool('ip', ['route', 'show', 'exact', this.#subnet]);
    const leftTable = await runTool('nft', ['list', 'table', 'inet', nftTableName(bridge)], { allowFailure: true });
    if (existsSync(`/sys/class/net/${bridge}`) || leftRoute.stdout.trim() !== '' || leftTable.code === 0) {
      throw new SandboxdError('internal', `network: teardown of ${bridge} left something behind`);
    }
    this.#loaded = undefined;
    this.#used.clear();
    this.#nets.clear();
    this.#cursor = this.#plan.first;
  }

  /**
   * Networks left for new sandboxes: free subnet addresses, or free ports of the bridge (a
   * Linux bridge takes at most 1023; one more fails with `Exchange full`), whichever is fewer.
   * What pooled networks hold counts as used. Reads the host once per instance (as attach does).
   */
  async freeAddresses(): Promise<{ free: number; total: number }> {
    const BRIDGE_MAX_PORTS = 1023;
    if (this.#ready) await this.#loadHostState().catch(() => {});
    const size = this.#plan.last - this.#plan.first + 1;
    let ports = 0;
    for (const owner of this.#used.values()) if (owner !== '') ports++;
    return {
      free: Math.max(0, Math.min(size - this.#used.size, BRIDGE_MAX_PORTS - ports)),
      total: Math.min(size, BRIDGE_MAX_PORTS),
    };
  }

  async #attach(id: string, pid?: number): Promise<SandboxNet> {
    const veth = hostVethName(id);
    if (this.#nets.has(id) || existsSync(netnsPath(id)) || existsSync(`/sys/class/net/${veth}`)) {
      throw new SandboxdError('conflict', `network of sandbox ${id} exists`);
    }
    await this.#loadHostState();
    const addr = this.#allocate(id);
    const net = this.#describe(id, intToIp(addr));
    try {
      await this.#create(id, net.address, pid);
    } catch (e) {
      await this.#remove(id).catch(() => {});
      throw e;
    }
    this.#nets.set(id, net);
    return net;
  }

  async #create(id: string, address: string, pid?: number): Promise<void> {
    const { bridge } = this.#opts;
    const cmd = attachCommand({ id, bridge, address, prefixLen: this.#plan.prefix.len, gateway: this.#gateway, pid });
    await runTool('sh', cmd.args, { input: cmd.input });
  }

  async #remove(id: string): Promise<void> {
    const { bridge } = this.#opts;
    const veth = hostVethName(id);
    const mac = sandboxMac(id);
    // An address this instance handed out is known; otherwise the MAC finds the host's entries.
    const known = this.#nets.get(id)?.address;
    const addresses = known
      ? [known]
      : (
          await runJson<{ dst: string; lladdr?: string }>(
            'ip',
            ['-j', 'neigh', 'show', 'dev', bridge, 'nud', 'permanent'],
            { allowFailure: true },
          )
        )
          .filter((n) => n.lladdr === mac)
          .map((n) => n.dst);
    // The veth goes explicitly: a deleted netns frees its devices only later, asynchronously.
    // `neigh flush` comes last because ip exits on some errors even with -force.
    const script = [
      ...(existsSync(`/sys/class/net/${veth}`) ? [`link del ${veth}`] : []),
      ...(existsSync(netnsPath(id)) ? [`netns del ${netnsName(id)}`] : []),
      ...addresses.map((a) => `neigh flush to ${a} dev ${bridge} nud permanent`),
    ];
    if (script.length > 0) {
      await runTool('ip', ['-force', '-batch', '-'], { input: `${script.join('\n')}\n`, allowFailure: true });
      if (existsSync(netnsPath(id)) || existsSync(`/sys/class/net/${veth}`)) {
        throw new SandboxdError('internal', `network: could not remove the network of sandbox ${id}`);
      }
    }
    this.#nets.delete(id);
    for (const [addr, owner] of this.#used) if (owner === id) this.#used.delete(addr);
  }

  /** Loads, once per instance, every subnet address the host already uses. */
  #loadHostState(): Promise<void> {
    this.#loaded ??= (async () => {
      const nets = await this.list();
      const neigh = await runJson<{ dst: string }>(
        'ip',
        ['-j', 'neigh', 'show', 'dev', this.#opts.bridge, 'nud', 'permanent'],
        { allowFailure: true },
      );
      for (const n of nets) if (n.address) this.#reserve(n.address, n.id);
      for (const n of neigh) this.#reserve(n.dst, '');
    })().catch((e: unknown) => {
      this.#loaded = undefined;
      throw e;
    });
    return this.#loaded;
  }

  #reserve(address: string, id: string): void {
    if (!/^[\d.]+$/.test(address)) return;
    const n = ipToInt(address);
    if (contains(this.#plan.prefix, n) && !this.#used.has(n)) this.#used.set(n, id);
  }

  /** Next free address after the last one handed out (synchronous: no other attach interleaves). */
  #allocate(id: string): number {
    const { first, last } = this.#plan;
    const size = last - first + 1;
    for (let i = 0; i < size; i++) {
      const candidate = first + ((this.#cursor - first + i) % size);
      if (!this.#used.has(candidate)) {
        this.#used.set(candidate, id);
        this.#cursor = candidate + 1 > last ? first : candidate + 1;
        return candidate;
      }
    }
    throw new SandboxdError('internal', `network: no free address left in ${this.#subnet}`);
  }

  async #readAddress(id: string): Promise<string> {
    const links = await runJson<{ addr_info?: { family: string; local: string }[] }>(
      'ip',
      ['-n', netnsName(id), '-j', '-4', 'addr', 'show', 'dev', 'eth0'],
      { allowFailure: true },
    );
    return links[0]?.addr_info?.find((a) => a.family === 'inet')?.local ?? '';
  }

  #describe(id: string, address: string): SandboxNet {
    return { id, netnsName: netnsName(id), netnsPath: netnsPath(id), address, gateway: this.#gateway };
  }

  /** Runs `fn` after every earlier call for `id` has settled. */
  #locked<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const run = (this.#locks.get(id) ?? Promise.resolve()).then(fn);
    const tail = run.catch(() => {});
    this.#locks.set(id, tail);
    void tail.then(() => {
      if (this.#locks.get(id) === tail) this.#locks.delete(id);
    });
    return run;
  }
}
