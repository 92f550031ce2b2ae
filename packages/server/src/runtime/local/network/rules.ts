import { formatPrefix, mergePrefixes, parsePrefix, type Prefix } from './addr.js';

/**
 * IPv4 ranges a sandbox never reaches even with NAT egress: private, shared, loopback,
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

/** Name of the nftables table (family inet) that holds every rule of one instance's network. */
export function nftTableName(name: string): string {
  return `sandboxd_${name}`;
}

/** Inputs of {@link buildRuleset}. */
export interface RulesetOptions {
  /** The instance's network name (`SANDBOXD_BRIDGE`): names the table. */
  name: string;
  /** Interface group of the instance's host veths: every rule matches the sandboxes by it. */
  group: number;
  /** Sandbox subnet, e.g. `10.89.0.0/16`. */
  subnet: string;
  egress: 'none' | 'nat';
  /** Networks on the host's other interfaces; with NAT they join {@link NON_PUBLIC_IPV4}. */
  hostNetworks: Prefix[];
}

/**
 * The complete nft script for one instance. Applied with `nft -f -` it replaces the table
 * in one transaction (create-if-missing, delete, re-create), so re-running it is idempotent
 * and there is never a moment without rules. Base chains run at priority -10, and a drop in
 * any base chain is final, so other tables' accepts cannot open what this table closes.
 * The rules are the same whatever the number of sandboxes: each sandbox's host veth is in
 * the instance's interface group, which `iifgroup`/`oifgroup` match.
 *
 * - prerouting: from a sandbox, no IPv6, and only packets whose source address the host
 *   routes back through the veth they came in on (strict reverse path): a sandbox cannot
 *   send with another sandbox's address, the gateway's or any other.
 * - input: from a sandbox only replies to connections the host opened (established,
 *   related); every new connection to any host address is dropped.
 * - forward, egress 'none': everything from or to a sandbox is dropped.
 * - forward, egress 'nat': to a sandbox only replies (so never sandbox to sandbox); from a
 *   sandbox nothing to the host's own, broadcast or multicast addresses, nothing to
 *   non-public ranges or the host's other networks; the rest is masqueraded.
 */
export function buildRuleset(o: RulesetOptions): string {
  const t = nftTableName(o.name);
  const g = String(o.group);
  const lines = [
    `table inet ${t} {}`,
    `delete table inet ${t}`,
    `table inet ${t} {`,
    '  chain prerouting {',
    '    type filter hook prerouting priority -10; policy accept;',
    `    iifgroup ${g} meta nfproto ipv6 drop`,
    `    iifgroup ${g} fib saddr . iif oif missing drop`,
    '  }',
    '  chain input {',
    '    type filter hook input priority -10; policy accept;',
    `    iifgroup ${g} ct state established,related accept`,
    `    iifgroup ${g} drop`,
    '  }',
    '  chain forward {',
    '    type filter hook forward priority -10; policy accept;',
  ];
  if (o.egress === 'none') {
    lines.push(`    iifgroup ${g} drop`, `    oifgroup ${g} drop`, '  }');
  } else {
    const blocked = mergePrefixes([...NON_PUBLIC_IPV4.map(parsePrefix), ...o.hostNetworks]).map(formatPrefix);
    lines.push(
      `    oifgroup ${g} ct state established,related accept`,
      `    oifgroup ${g} drop`,
      `    iifgroup ${g} fib daddr type { local, broadcast, multicast, anycast } drop`,
      `    iifgroup ${g} ip daddr { ${blocked.join(', ')} } drop`,
      '  }',
      '  chain postrouting {',
      '    type nat hook postrouting priority 110; policy accept;',
      `    ip saddr ${o.subnet} oifgroup != ${g} masquerade`,
      '  }',
    );
  }
  lines.push('}');
  return `${lines.join('\n')}\n`;
}
