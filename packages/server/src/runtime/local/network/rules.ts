import { formatPrefix, mergePrefixes, parsePrefix, type Prefix } from './addr.js';

/**
 * IPv4 ranges a sandbox never reaches, whatever its egress: private, shared, loopback,
 * link-local (cloud metadata), benchmarking, multicast and reserved space.
 */
export const NON_PUBLIC_IPV4 = [
  '0.0.0.0/8',
  '10.0.0.0/8',
  '100.64.0.0/10',
  '127.0.0.0/8',
  '169.254.0.0/16',
  '172.16.0.0/12',
  '192.0.0.0/24',
  '192.168.0.0/16',
  '198.18.0.0/15',
  '224.0.0.0/3',
];

/** One address of a cloud's metadata or host-agent service. */
export interface CloudHostService {
  /** IPv4 or IPv6 address. */
  address: string;
  /** Whose and what it is. */
  what: string;
}

/**
 * Every cloud metadata and host-agent address we know of: what a sandbox must never reach,
 * whatever its egress (`internet`, a CIDR rule covering it, the address itself as a rule, an
 * allowed name resolving to it). The IPv4 ones are in {@link blockedPrefixes} (most already
 * fall in {@link NON_PUBLIC_IPV4}: link-local, shared and IETF space; Azure's WireServer is a
 * public address and is listed on its own); the IPv6 ones are never reached because every
 * IPv6 packet of a sandbox is dropped (and IPv6 is off inside it). Metadata reached by a
 * public name with a public, changing address (Equinix Metal's
 * `metadata.platformequinix.com`) cannot be listed: see docs/runtime.md.
 * Sources: each cloud's documentation of its instance metadata service (2026-12).
 */
export const CLOUD_HOST_SERVICES: readonly CloudHostService[] = [
  {
    address: '169.254.169.254',
    what:
      'instance metadata: AWS IMDS, GCP (metadata.google.internal), Azure IMDS, Oracle, OpenStack, ' +
      'DigitalOcean, Hetzner, Huawei, IBM, Linode, Vultr, Exoscale, UpCloud',
  },
  { address: '169.254.169.253', what: 'AWS VPC DNS resolver (Route 53 Resolver)' },
  { address: '169.254.169.123', what: 'AWS Time Sync' },
  { address: '169.254.170.2', what: 'AWS ECS task metadata and credentials' },
  { address: '169.254.170.23', what: 'AWS EKS Pod Identity agent (credentials)' },
  { address: '169.254.0.23', what: 'Tencent Cloud metadata (metadata.tencentyun.com)' },
  { address: '169.254.42.42', what: 'Scaleway metadata' },
  { address: '168.63.129.16', what: 'Azure WireServer (host agent, DNS, health probes; a public address)' },
  { address: '100.100.100.200', what: 'Alibaba Cloud metadata' },
  { address: '192.0.0.192', what: 'Oracle Cloud metadata (legacy)' },
  { address: 'fd00:ec2::254', what: 'AWS IMDS over IPv6' },
  { address: 'fd00:ec2::253', what: 'AWS VPC DNS resolver over IPv6' },
  { address: 'fd00:ec2::123', what: 'AWS Time Sync over IPv6' },
  { address: 'fd00:ec2::23', what: 'AWS EKS Pod Identity agent over IPv6' },
  { address: 'fd20:ce::254', what: 'GCP metadata over IPv6' },
  { address: 'fd00:a9fe:a9fe::1', what: 'Linode (Akamai) metadata over IPv6' },
  { address: 'fd00:42::42', what: 'Scaleway metadata over IPv6' },
];

/** The IPv4 addresses of {@link CLOUD_HOST_SERVICES}. */
export const CLOUD_HOST_SERVICES_IPV4: readonly string[] = CLOUD_HOST_SERVICES.map((s) => s.address).filter((a) =>
  /^\d+\.\d+\.\d+\.\d+$/.test(a),
);

/**
 * The one list of destinations no sandbox reaches (the forward chain drops them, and the
 * egress proxy refuses them): {@link NON_PUBLIC_IPV4}, the IPv4 addresses of
 * {@link CLOUD_HOST_SERVICES}, and the host's other networks.
 */
export function blockedPrefixes(hostNetworks: Prefix[]): Prefix[] {
  return mergePrefixes([
    ...NON_PUBLIC_IPV4.map(parsePrefix),
    ...CLOUD_HOST_SERVICES_IPV4.map((a) => parsePrefix(`${a}/32`)),
    ...hostNetworks,
  ]);
}

/** Name of the nftables table (family inet) that holds every rule of one instance's network. */
export function nftTableName(name: string): string {
  return `sandboxd_${name}`;
}

/**
 * The sets of the table that say, per sandbox address, what it may reach. Their elements
 * are the only per-sandbox state of the firewall; the rules never change with them.
 */
export const EGRESS_SETS = {
  /** Sandbox addresses whose egress is `internet`. */
  internet: 'egress_internet',
  /** Sandbox addresses with `allow` rules (DNS through sandboxd, 80/443 through the proxy). */
  ruled: 'egress_ruled',
  /** `sandbox . destination` from DNS answers of allowed names, each with the answer's TTL as timeout. */
  resolved: 'egress_resolved',
  /** `sandbox . prefix` of CIDR rules (interval set). */
  nets: 'egress_nets',
  /** Always empty: listed after each batch of a long-lived `nft -i` to tell that it is done. */
  marker: 'egress_marker',
} as const;

/** The host ports the egress services listen on (on the gateway address); 0 = not running. */
export interface EgressPorts {
  /** The resolver, UDP and TCP (a sandbox's queries to gateway:53 are redirected there). */
  dnsUdp: number;
  dnsTcp: number;
  /** The proxy for TCP 80 (HTTP, checked by Host) and 443 (TLS, checked by SNI). */
  http: number;
  tls: number;
}

/** Inputs of {@link buildRuleset}. */
export interface RulesetOptions {
  /** The instance's network name (`SANDBOXD_BRIDGE`): names the table. */
  name: string;
  /** Interface group of the instance's host veths: every rule matches the sandboxes by it. */
  group: number;
  /** Sandbox subnet, e.g. `10.89.0.0/16`. */
  subnet: string;
  /** The gateway address (on the anchor device): where the resolver and the proxy listen. */
  gateway: string;
  /** Networks on the host's other interfaces: joined to {@link NON_PUBLIC_IPV4}. */
  hostNetworks: Prefix[];
  /** The egress services' ports; absent (or zeros) while they do not run: DNS and 80/443 are then dropped. */
  ports?: EgressPorts;
}

/**
 * The complete nft script for one instance. Applied with `nft -f -` it replaces the table
 * in one transaction (create-if-missing, delete, re-create), so re-running it is idempotent
 * and there is never a moment without rules (its sets start empty: every sandbox is back to
 * `none` until its egress is applied again). Filter chains run at priority -10, and a drop
 * in any base chain is final, so other tables' accepts cannot open what this table closes.
 * The rules are the same whatever the number of sandboxes and their egress: each sandbox's
 * host veth is in the instance's interface group, which `iifgroup`/`oifgroup` match, and
 * what one sandbox may reach is elements of the sets of {@link EGRESS_SETS}.
 *
 * - raw (before conntrack): a sandbox's UDP queries to gateway:53 past its rate
 *   ({@link DNS_QUERIES_PER_SECOND}) are dropped.
 * - prerouting: from a sandbox, no IPv6, and only packets whose source address the host
 *   routes back through the veth they came in on (strict reverse path): a sandbox cannot
 *   send with another sandbox's address, the gateway's or any other. Then (nat) a query to
 *   gateway:53 of an `internet` or ruled sandbox goes to the resolver, and TCP 80/443 of a
 *   ruled sandbox, to any address but those of its CIDR rules, to the proxy.
 * - input: from a sandbox only replies to connections the host opened, and what the nat
 *   rules above redirected to the resolver and the proxy; every other new connection to any
 *   host address is dropped.
 * - forward: to a sandbox only replies (so never sandbox to sandbox); from a sandbox,
 *   packets of connections already allowed, then nothing to the host's own, broadcast or
 *   multicast addresses, non-public ranges or the host's other networks; then `internet`
 *   sandboxes reach the rest, ruled ones the addresses their allowed names resolved to
 *   (until the answer's TTL; UDP 443, QUIC, only within their CIDRs) and their CIDRs;
 *   everything else is dropped.
 * - postrouting: what leaves from the subnet (sandboxes, and the resolver and proxy, which
 *   speak from the gateway address) is masqueraded.
 */
/**
 * UDP queries a second one sandbox may send its resolver, past a burst of
 * {@link DNS_QUERIES_BURST}; the rest are dropped by the kernel before conntrack and before
 * the resolver's socket. Without it, one sandbox's flood (~8,000 queries/s measured) fills the
 * queue of the resolver's one UDP socket and its neighbours' datagrams are dropped with it
 * (the resolver's per-sandbox share only counts what it has read). A program asking for
 * hundreds of names a second stays well under it; resolvers retry what is dropped.
 */
export const DNS_QUERIES_PER_SECOND = 1000;
export const DNS_QUERIES_BURST = 1000;
/** The dynamic set holding each sandbox's query rate (its address: its meter). */
const DNS_RATE_SET = 'dns_rate';

export function buildRuleset(o: RulesetOptions): string {
  const t = nftTableName(o.name);
  const g = String(o.group);
  const s = EGRESS_SETS;
  const blocked = blockedPrefixes(o.hostNetworks).map(formatPrefix);
  const p = o.ports?.dnsUdp && o.ports.dnsTcp && o.ports.http && o.ports.tls ? o.ports : null;
  const gw = o.gateway;
  const lines = [
    `table inet ${t} {}`,
    `delete table inet ${t}`,
    `table inet ${t} {`,
    `  set ${s.internet} { type ipv4_addr; }`,
    `  set ${s.ruled} { type ipv4_addr; }`,
    `  set ${s.resolved} { type ipv4_addr . ipv4_addr; flags timeout; }`,
    `  set ${s.nets} { type ipv4_addr . ipv4_addr; flags interval; }`,
    `  set ${s.marker} { type ipv4_addr; }`,
    // Each sandbox's rate of UDP queries to its resolver, kept while it sends (see dnsRate).
    `  set ${DNS_RATE_SET} { type ipv4_addr; size 65536; flags dynamic,timeout; timeout 10s; }`,
    '  chain raw {',
    '    type filter hook prerouting priority -300; policy accept;',
    `    iifgroup ${g} ip daddr ${gw} udp dport 53 add @${DNS_RATE_SET} { ip saddr limit rate over ${DNS_QUERIES_PER_SECOND}/second burst ${DNS_QUERIES_BURST} packets } drop`,
    '  }',
    '  chain prerouting {',
    '    type filter hook prerouting priority -10; policy accept;',
    `    iifgroup ${g} meta nfproto ipv6 drop`,
    `    iifgroup ${g} fib saddr . iif oif missing drop`,
    '  }',
  ];
  if (p) {
    lines.push(
      '  chain steer {',
      '    type nat hook prerouting priority -110; policy accept;',
      `    iifgroup ${g} ip daddr ${gw} udp dport 53 ip saddr @${s.internet} dnat ip to ${gw}:${p.dnsUdp}`,
      `    iifgroup ${g} ip daddr ${gw} tcp dport 53 ip saddr @${s.internet} dnat ip to ${gw}:${p.dnsTcp}`,
      `    iifgroup ${g} ip daddr ${gw} udp dport 53 ip saddr @${s.ruled} dnat ip to ${gw}:${p.dnsUdp}`,
      `    iifgroup ${g} ip daddr ${gw} tcp dport 53 ip saddr @${s.ruled} dnat ip to ${gw}:${p.dnsTcp}`,
      // A CIDR rule's addresses are reached as dialled, by any name.
      `    iifgroup ${g} ip saddr . ip daddr @${s.nets} return`,
      `    iifgroup ${g} tcp dport 80 ip saddr @${s.ruled} dnat ip to ${gw}:${p.http}`,
      `    iifgroup ${g} tcp dport 443 ip saddr @${s.ruled} dnat ip to ${gw}:${p.tls}`,
      '  }',
    );
  }
  lines.push(
    '  chain input {',
    '    type filter hook input priority -10; policy accept;',
    `    iifgroup ${g} ct state established,related accept`,
    ...(p
      ? [
          `    iifgroup ${g} ct status dnat ip daddr ${gw} udp dport ${p.dnsUdp} accept`,
          `    iifgroup ${g} ct status dnat ip daddr ${gw} tcp dport { ${p.dnsTcp}, ${p.http}, ${p.tls} } accept`,
        ]
      : []),
    `    iifgroup ${g} drop`,
    '  }',
    '  chain forward {',
    '    type filter hook forward priority -10; policy accept;',
    `    oifgroup ${g} ct state established,related accept`,
    `    oifgroup ${g} drop`,
    `    iifgroup ${g} ct state established,related accept`,
    `    iifgroup ${g} fib daddr type { local, broadcast, multicast, anycast } drop`,
    `    iifgroup ${g} ip daddr { ${blocked.join(', ')} } drop`,
    `    iifgroup ${g} ip saddr @${s.internet} accept`,
    // QUIC carries its SNI where the proxy cannot read it: ruled sandboxes fall back to TCP.
    `    iifgroup ${g} ip saddr @${s.ruled} udp dport 443 ip saddr . ip daddr != @${s.nets} drop`,
    `    iifgroup ${g} ip saddr . ip daddr @${s.resolved} accept`,
    `    iifgroup ${g} ip saddr . ip daddr @${s.nets} accept`,
    `    iifgroup ${g} drop`,
    '  }',
    '  chain postrouting {',
    '    type nat hook postrouting priority 110; policy accept;',
    `    ip saddr ${o.subnet} oifgroup != ${g} masquerade`,
    '  }',
    '}',
  );
  return `${lines.join('\n')}\n`;
}
