import { SandboxdError } from '@sandboxd/protocol';
import { ipToInt } from './addr.js';

/** Where egress goes: an interface, and the next hop on it (none: on-link). */
export interface Via {
  dev: string;
  nextHop?: string;
}

const DEV_RE = /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,14}$/;

/** Parses `dev` or `dev:next-hop` (`SANDBOXD_EGRESS_VIA`); throws `validation`. */
export function parseVia(text: string): Via {
  const [dev, nextHop, extra] = text.split(':');
  if (extra !== undefined || !DEV_RE.test(dev ?? ''))
    throw new SandboxdError('validation', `egress via "${text}" must be an interface name, or name:next-hop-address`);
  if (nextHop !== undefined) ipToInt(nextHop);
  return nextHop === undefined ? { dev } : { dev, nextHop };
}

/** The routing table of an instance's egress (one per interface group). */
export function viaTable(group: number): number {
  return 0x5bd00000 + (group & 0xfffff);
}

/** Rule priorities: main without its default route first, then the instance's table. */
const PRIO = 5210;

/**
 * The `ip -batch` script that sends everything from `subnet` that the host's own routes
 * do not send elsewhere more specifically (the sandboxes' /32 routes, local addresses)
 * through `via`: `from subnet lookup main suppress_prefixlength 0` (main, but not its
 * default route), then `from subnet lookup <table>` whose only route is the default via it.
 */
export function viaRoutingScript(via: Via, subnet: string, group: number): string {
  const table = viaTable(group);
  return [
    `route replace default ${via.nextHop ? `via ${via.nextHop} ` : ''}dev ${via.dev} table ${table}${via.nextHop ? ' onlink' : ''}`,
    `rule add from ${subnet} lookup main suppress_prefixlength 0 priority ${PRIO}`,
    `rule add from ${subnet} lookup ${table} priority ${PRIO + 1}`,
    '',
  ].join('\n');
}

/** The `ip` arguments deleting each rule {@link viaRoutingScript} adds (one per call: run each until it fails). */
export function viaRuleDeletions(subnet: string, group: number): string[][] {
  return [
    ['rule', 'del', 'from', subnet, 'lookup', 'main', 'suppress_prefixlength', '0', 'priority', String(PRIO)],
    ['rule', 'del', 'from', subnet, 'lookup', String(viaTable(group)), 'priority', String(PRIO + 1)],
  ];
}
