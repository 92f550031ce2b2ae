import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { contains, ipToInt } from './addr.js';
import {
  blockedPrefixes,
  buildRuleset,
  CLOUD_HOST_SERVICES,
  DNS_QUERIES_BURST,
  DNS_QUERIES_PER_SECOND,
} from './rules.js';

/** The addresses the review named (docs/security.md, finding 6): the list must hold at least these. */
const NAMED = [
  '169.254.169.254',
  'fd00:ec2::254',
  '169.254.170.2',
  '169.254.169.123',
  '168.63.129.16',
  '100.100.100.200',
  '192.0.0.192',
  '169.254.0.23',
];

const blocked = (ip: string) => blockedPrefixes([]).some((p) => contains(p, ipToInt(ip)));

describe('cloud metadata and host-agent addresses', () => {
  it('lists every address the review named, each once', () => {
    const listed = CLOUD_HOST_SERVICES.map((s) => s.address);
    for (const a of NAMED) assert.ok(listed.includes(a), `${a} is not in CLOUD_HOST_SERVICES`);
    assert.equal(new Set(listed).size, listed.length, 'an address listed twice');
    for (const s of CLOUD_HOST_SERVICES) assert.ok(s.what.length > 0, `${s.address} says nothing`);
  });

  it('blocks every IPv4 one whatever the host networks; IPv6 is dropped from sandboxes wholesale', () => {
    for (const { address } of CLOUD_HOST_SERVICES) {
      if (address.includes(':')) continue;
      assert.ok(blocked(address), `${address} is reachable`);
    }
    // The WireServer is a public address: named on its own, not inside a private range.
    assert.ok(blocked('168.63.129.16'));
    assert.ok(!blocked('168.63.129.15') && !blocked('168.63.129.17'), 'only the address itself');
    const rules = buildRuleset({
      name: 'sbxt-rules',
      group: 1 << 28,
      subnet: '10.89.251.0/24',
      gateway: '10.89.251.1',
      hostNetworks: [],
    });
    assert.match(rules, /iifgroup \d+ meta nfproto ipv6 drop/);
    assert.match(rules, /168\.63\.129\.16/);
  });

  it("meters each sandbox's UDP queries to its resolver before conntrack", () => {
    const rules = buildRuleset({
      name: 'sbxt-rules',
      group: 1 << 28,
      subnet: '10.89.251.0/24',
      gateway: '10.89.251.1',
      hostNetworks: [],
    });
    const raw = /chain raw \{\n\s+type filter hook prerouting priority -300;[^}]*\n\s+(.*)\n/.exec(rules);
    assert.ok(raw, rules);
    assert.equal(
      raw[1],
      `iifgroup ${1 << 28} ip daddr 10.89.251.1 udp dport 53 add @dns_rate { ip saddr limit rate over ${DNS_QUERIES_PER_SECOND}/second burst ${DNS_QUERIES_BURST} packets } drop`,
    );
  });
});
