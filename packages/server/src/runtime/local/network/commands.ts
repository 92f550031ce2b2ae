import { hostVethName, netnsName, netnsPath, sandboxMac } from './addr.js';

/**
 * One process per attach (a fork from sh costs less than a spawn): the host-side
 * `ip -batch` arrives on stdin, then the static FDB entry and IPv6 off on the host port;
 * inside the netns IPv6 goes off before the sandbox-side `ip -batch`, whose script is $4.
 * $1 = sandbox MAC, $2 = host veth, $3 = netns path.
 */
const ATTACH_SCRIPT = [
  'ip -batch -',
  'bridge fdb replace "$1" dev "$2" master static',
  'echo 1 > "/proc/sys/net/ipv6/conf/$2/disable_ipv6"',
  `exec nsenter --net="$3" sh -c '${[
    'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6',
    'echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6',
    'printf %s "$1" | ip -batch -',
  ].join(' && ')}' sh "$4"`,
].join(' && ');

/** What {@link attachCommand} needs to know about one sandbox. */
export interface AttachPlan {
  id: string;
  bridge: string;
  /** Sandbox IPv4 address, its prefix length and the gateway. */
  address: string;
  prefixLen: number;
  gateway: string;
  /** Name the netns of this running process instead of making a new one (`ip netns attach`). */
  pid?: number;
}

/** A `sh` invocation for `runTool`: argv plus the text for stdin. */
export interface ShellCommand {
  args: string[];
  input: string;
}

/**
 * The one command that builds a sandbox network: netns `sbx-<id>` (new, or the netns of
 * process `pid`, for runtimes that make it themselves); a veth pair made with its
 * sandbox end already inside (named eth0, MAC from the id) and its host end on the bridge as
 * an isolated, locked port that learns and floods nothing; a static FDB entry (the only
 * source MAC the locked port lets in) and a permanent neighbour entry, so the host reaches
 * exactly that MAC at that address; inside, IPv6 off,
 * lo and eth0 up, the address and a default route via the gateway.
 */
export function attachCommand(p: AttachPlan): ShellCommand {
  const veth = hostVethName(p.id);
  const ns = netnsName(p.id);
  const mac = sandboxMac(p.id);
  const host = [
    p.pid ? `netns attach ${ns} ${p.pid}` : `netns add ${ns}`,
    `link add ${veth} master ${p.bridge} type veth peer name eth0 netns ${ns} address ${mac}`,
    `link set ${veth} alias sandboxd:${p.id} addrgenmode none`,
    `link set ${veth} type bridge_slave isolated on learning off flood off locked on`,
    `link set ${veth} up`,
    `neigh replace ${p.address} lladdr ${mac} dev ${p.bridge} nud permanent`,
  ];
  const inside = [
    `addr add ${p.address}/${p.prefixLen} dev eth0`,
    'link set lo up',
    'link set eth0 up',
    `route add default via ${p.gateway}`,
  ];
  return {
    args: ['-c', ATTACH_SCRIPT, 'sh', mac, veth, netnsPath(p.id), `${inside.join('\n')}\n`],
    input: `${host.join('\n')}\n`,
  };
}
