import { overlaps, parsePrefix, type Prefix } from './addr.js';
import { runJson } from './exec.js';

/**
 * The IPv4 networks of every host interface but `bridge` (from `ip -j -4 addr`), e.g. the
 * LAN behind eth0: NAT egress never forwards to them.
 */
export async function hostNetworksBesides(bridge: string): Promise<Prefix[]> {
  const links = await runJson<{ ifname: string; addr_info?: { local: string; prefixlen: number }[] }>('ip', [
    '-j',
    '-4',
    'addr',
    'show',
  ]);
  return links
    .filter((l) => l.ifname !== bridge)
    .flatMap((l) => l.addr_info ?? [])
    .map((a) => parsePrefix(`${a.local}/${a.prefixlen}`));
}

/**
 * The first host route (any table; the default route, the instance's own routes and its
 * blackhole aside) that shares addresses with `subnet`, as `dst dev X`, or null. A sandbox
 * subnet there would capture traffic meant for a LAN, a VPN or another instance. `ours`
 * tells the devices of this instance (its anchor device, its sandboxes' veths).
 */
export async function findRouteClash(subnet: Prefix, ours: (dev: string) => boolean): Promise<string | null> {
  const routes = await runJson<{ type?: string; dst: string; dev?: string }>('ip', [
    '-j',
    '-4',
    'route',
    'show',
    'table',
    'all',
  ]);
  for (const r of routes) {
    if (r.dst === 'default' || (r.dev !== undefined && ours(r.dev)) || !/^[\d.]+(\/\d+)?$/.test(r.dst)) continue;
    const dst = parsePrefix(r.dst.includes('/') ? r.dst : `${r.dst}/32`);
    if (r.type === 'blackhole' && dst.base === subnet.base && dst.len === subnet.len) continue;
    if (overlaps(dst, subnet)) return `${r.dst}${r.dev ? ` dev ${r.dev}` : ''}`;
  }
  return null;
}
