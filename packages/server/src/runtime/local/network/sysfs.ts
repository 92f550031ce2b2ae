import { readdirSync, realpathSync } from 'node:fs';
import { dirname } from 'node:path';

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
