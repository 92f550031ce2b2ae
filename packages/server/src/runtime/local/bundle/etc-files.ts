import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Host files bound read-only over a sandbox's /etc/hosts, /etc/hostname and /etc/resolv.conf. */
export interface EtcFiles {
  hosts: string;
  hostname: string;
  resolv: string;
}

/**
 * Writes the /etc files of a sandbox named `hostname` into `dir` (a bundle folder, on the
 * run dir's tmpfs: written synchronously, a few microseconds each): hosts (naming the
 * sandbox at `address`, when known), hostname and resolv.conf, naming `nameserver` (the
 * gateway, where sandboxd's resolver answers: whatever the sandbox's egress, its names
 * resolve there or nowhere). Returns their paths and `setAddress`, which rewrites hosts for
 * an address known only later.
 */
export function writeEtcFiles(
  dir: string,
  hostname: string,
  address: string,
  nameserver: string,
): { files: EtcFiles; setAddress: (address: string) => void } {
  const files: EtcFiles = {
    hosts: join(dir, 'hosts'),
    hostname: join(dir, 'hostname'),
    resolv: join(dir, 'resolv.conf'),
  };
  // Rewritten in place (same inode, so the bind mount shows it) once the address is known.
  const setAddress = (a: string) =>
    writeFileSync(files.hosts, `127.0.0.1\tlocalhost\n::1\tlocalhost\n${a ? `${a}\t${hostname}\n` : ''}`);
  setAddress(address);
  writeFileSync(files.hostname, `${hostname}\n`);
  writeFileSync(files.resolv, `nameserver ${nameserver}\noptions timeout:2 attempts:2\n`);
  return { files, setAddress };
}
