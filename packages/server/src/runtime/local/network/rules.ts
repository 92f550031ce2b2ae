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

/** Name of the nftables table (family inet) that holds every rule of one bridge. */
export function nftTableName(bridge: string): string {
  return `sandboxd_${bridge}`;
}

/** Inputs of {@link buildRuleset}. */
export interface RulesetOptions {
  bridge: string;
  /** Sandbox subnet, e.g. `10.89.0.0/16`. */
  subnet: string;
  egress: 'none' | 'nat';
  /** Networks on the host's other interfaces; with NAT they join {@link NON_PUBLIC_IPV4}. */
  hostNetworks: Prefix[];
}

/**
 * The complete nft script for one bridge. Applied with `nft -f -` it replaces the table in
 * one transaction (create-if-missing, delete, re-create), so re-running it is idempotent and
 * there is never a moment without rules. Base chains run at priority -10, and a drop in any
 * base chain is final, so other tables' accepts cannot open what this table closes.
 *
 * - input: from the bridge only replies to connections the host opened (established,
 *   related); every new connection to any host address, IPv4 or IPv6, is dropped.
 * - forward, egress 'none': everything from or to the bridge is dropped.
 * - forward, egress 'nat': into the bridge only replies; from the bridge no IPv6, nothing
 *   to the host's own, broadcast or multicast addresses, nothing to non-public ranges or the
 *   host's other networks; the rest is masqueraded.
 */
export function buildRuleset(o: RulesetOptions): string {
  const t = nftTableName(o.bridge);
  const br = `"${o.bridge}"`;
  const lines = [
    `table inet ${t} {}`,
    `delete table inet ${t}`,
    `table inet ${t} {`,
    '  chain input {',
    '    type filter hook input priority -10; policy accept;',
    `    iifname ${br} ct state established,related accept`,
    `    iifname ${br} drop`,
    '  }',
    '  chain forward {',
    '    type filter hook forward priority -10; policy accept;',
  ];
  if (o.egress === 'none') {
    lines.push(`    iifname ${br} drop`, `    oifname ${br} drop`, '  }');
  } else {
    const blocked = mergePrefixes([...NON_PUBLIC_IPV4.map(parsePrefix), ...o.hostNetworks]).map(formatPrefix);
    lines.push(
      `    oifname ${br} ct state established,related accept`,
      `    oifname ${br} drop`,
      `    iifname ${br} meta nfproto ipv6 drop`,
      `    iifname ${br} fib daddr type { local, broadcast, multicast, anycast } drop`,
      `    iifname ${br} ip daddr { ${blocked.join(', ')} } drop`,
      '  }',
      '  chain postrouting {',
      '    type nat hook postrouting priority 110; policy accept;',
      `    ip saddr ${o.subnet} oifname != ${br} masquerade`,
      '  }',
    );
  }
  lines.push('}');
  return `${lines.join('\n')}\n`;
}
