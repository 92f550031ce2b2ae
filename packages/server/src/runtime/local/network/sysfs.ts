import { readdirSync, readFileSync, realpathSync } from 'node:fs';
import { dirname } from 'node:path';
import { hostVethName, SANDBOX_ID_RE } from './addr.js';

/** Names of the host ends of sandbox veths (`sv` + 10 hex digits, see hostVethName). */
const VETH_RE = /^sv[0-9a-f]{10}$/;

/**
 * Every /sys folder that shows a host network device: all of /sys/class/net and
 * /sys/devices/virtual/net (bridges, veths of every sandbox), and the real device folder of
 * each physical interface (its `net` folder under /sys/devices/...).
 */
export function hostNetDevicePaths(): string[] {
  const out = new Set(['/sys/class/net', '/sys/devices/virtual/net']);
  for (const name of readdirSync('/sys/class/net')) {
    try {
      const real = realpathSync(`/sys/class/net/${name}`);
      if (!real.startsWith('/sys/devices/virtual/')) out.add(dirname(real));
    } catch {
      /* gone meanwhile */
    }
  }
  return [...out];
}

/**
 * Host veths of the instance named `bridge` whose interface group is `group`: name ->
 * sandbox id (from the alias `sandboxd:<id>`). Ports of the anchor device `bridge` are
 * veths of an older version of this instance (bridged topology): theirs too.
 */
export function instanceVeths(bridge: string, group: number): Map<string, string> {
  const out = new Map<string, string>();
  let names: string[] = [];
  try {
    names = readdirSync('/sys/class/net');
  } catch {
    return out;
  }
  let ports = new Set<string>();
  try {
    ports = new Set(readdirSync(`/sys/class/net/${bridge}/brif`));
  } catch {
    /* no anchor */
  }
  for (const n of names) {
    if (!VETH_RE.test(n) || !(ports.has(n) || isInstanceVeth(n, group))) continue;
    const id = readSys(`/sys/class/net/${n}/ifalias`).replace(/^sandboxd:/, '');
    if (SANDBOX_ID_RE.test(id) && hostVethName(id) === n) out.set(n, id);
  }
  return out;
}

/** Whether `dev` is a host veth in interface group `group` (an instance's). */
export function isInstanceVeth(dev: string, group: number): boolean {
  return VETH_RE.test(dev) && readSys(`/sys/class/net/${dev}/netdev_group`) === String(group);
}

/** The trimmed contents of a /sys file, or '' when it cannot be read. */
export function readSys(path: string): string {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return '';
  }
}
