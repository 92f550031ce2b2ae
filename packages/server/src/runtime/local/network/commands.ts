import { hostVethMac, hostVethName, netnsName, netnsPath, sandboxMac } from './addr.js';

/**
 * One process per attach (a fork from sh costs less than a spawn): the host-side
 * `ip -batch` arrives on stdin, then IPv6 off on the host veth; then the mount helper joins
 * the netns, turns IPv6 off there and execs the sandbox-side `ip -batch`, whose script is $3.
 * $1 = host veth, $2 = netns path, $4 = the mount helper (native/idmap-mount.c). No command
 * here lists the host's links or neighbours (`ip neigh` and `bridge fdb` on a host device
 * dump every link of the host, each create paying for all the others), and the sysctls
 * inside go through a proc instance of the helper's own (in the host's /proc/sys, a name
 * every netns has, such as "all", is one cached entry per netns to walk).
 */
const ATTACH_SCRIPT = [
  'ip -batch -',
  'echo 1 > "/proc/sys/net/ipv6/conf/$1/disable_ipv6"',
  `printf %s "$3" | exec "$4" in-netns "$2" ${[
    'net/ipv6/conf/all/disable_ipv6=1',
    'net/ipv6/conf/default/disable_ipv6=1',
  ].join(' ')} -- ip -batch -`,
].join(' && ');

/** What {@link attachCommand} needs to know about one sandbox. */
export interface AttachPlan {
  id: string;
  /** Interface group of the instance's host veths ({@link instanceGroup}). */
  group: number;
  /** Sandbox IPv4 address and the gateway (a host address, on the instance's anchor device). */
  address: string;
  gateway: string;
  /** Name the netns of this running process instead of making a new one (`ip netns attach`). */
  pid?: number;
  /** Path of the mount helper (native/idmap-mount.c), which runs the sandbox side. */
  helper: string;
}

/** A `sh` invocation for `runTool`: argv plus the text for stdin. */
export interface ShellCommand {
  args: string[];
  input: string;
}

/**
 * The one command that builds a sandbox network: netns `sbx-<id>` (new, or the netns of
 * process `pid`, for runtimes that make it themselves); a veth pair made with its sandbox
 * end already inside (named eth0, MAC from the id) and its host end in the instance's
 * interface group, with no address of its own; a /32 host route to the sandbox's address
 * through that veth (source: the gateway), so the host reaches that address on that veth
 * only. Inside: IPv6 off, lo and eth0 up, the address as a /32, a permanent neighbour entry
 * for the gateway (the host veth's MAC; no ARP needed, whatever the host's arp_ignore) and
 * the default route through it.
 */
export function attachCommand(p: AttachPlan): ShellCommand {
  const veth = hostVethName(p.id);
  const ns = netnsName(p.id);
  const gwMac = hostVethMac(p.id);
  const host = [
    p.pid ? `netns attach ${ns} ${p.pid}` : `netns add ${ns}`,
    `link add ${veth} group ${p.group} address ${gwMac} type veth peer name eth0 netns ${ns} address ${sandboxMac(p.id)}`,
    `link set ${veth} alias sandboxd:${p.id} addrgenmode none up`,
    `route add ${p.address}/32 dev ${veth} src ${p.gateway}`,
  ];
  const inside = [
    `addr add ${p.address}/32 dev eth0`,
    'link set lo up',
    'link set eth0 up',
    `neigh replace ${p.gateway} lladdr ${gwMac} dev eth0 nud permanent`,
    `route add default via ${p.gateway} dev eth0 onlink`,
  ];
  return {
    args: ['-c', ATTACH_SCRIPT, 'sh', veth, netnsPath(p.id), `${inside.join('\n')}\n`, p.helper],
    input: `${host.join('\n')}\n`,
  };
}
