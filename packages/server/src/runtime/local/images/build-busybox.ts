/**
 * Builds `local/busybox:latest` offline from the host's static busybox (Debian's
 * busybox-static): one layer with /bin/busybox, an absolute symlink per applet (what
 * `busybox --install -s` makes), /etc/passwd, /etc/group, /etc/shadow, /etc/hosts, empty
 * /etc/hostname and /etc/resolv.conf, /tmp (1777), /root (0700) and empty mount points.
 * Reproducible: same busybox binary, same digest.
 */
import { chmod, copyFile, mkdir, stat, symlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { runTool } from './run.js';
import { writeOciImage, type WrittenImage } from './oci-write.js';

export const BUSYBOX_BIN = '/bin/busybox';

/** Image config of local/busybox. WorkingDir `/`: root's home holds nothing useful. */
export const BUSYBOX_CONFIG = {
  env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'],
  workingDir: '/',
  user: 'root',
  cmd: ['/bin/sh'],
  labels: { 'org.opencontainers.image.title': 'sandboxd local busybox' },
};

const DIRS: [string, number][] = [
  ['bin', 0o755],
  ['sbin', 0o755],
  ['usr', 0o755],
  ['usr/bin', 0o755],
  ['usr/sbin', 0o755],
  ['usr/local', 0o755],
  ['usr/local/bin', 0o755],
  ['usr/local/sbin', 0o755],
  ['etc', 0o755],
  ['root', 0o700],
  ['home', 0o755],
  ['tmp', 0o1777],
  ['var', 0o755],
  ['var/tmp', 0o1777],
  ['dev', 0o755],
  ['proc', 0o555],
  ['sys', 0o555],
  ['run', 0o755],
];

const FILES: [string, string, number][] = [
  ['etc/passwd', 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n', 0o644],
  ['etc/group', 'root:x:0:\nnogroup:x:65534:\n', 0o644],
  ['etc/shadow', 'root:*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n', 0o640],
  // Mount targets for the runtime's own copies.
  ['etc/hosts', '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n', 0o644],
  ['etc/hostname', '', 0o644],
  ['etc/resolv.conf', '', 0o644],
];

/**
 * Writes the busybox image into OCI layout `layout` under `tag`, using `work` (an empty
 * dir, removed by the caller) for the staging tree and the layer tar.
 */
export async function buildBusyboxLayout(
  layout: string,
  tag: string,
  work: string,
  opts: { timeoutMs: number; busybox?: string },
): Promise<WrittenImage> {
  const bin = opts.busybox ?? BUSYBOX_BIN;
  const root = join(work, 'rootfs');
  await mkdir(root);
  for (const [d, mode] of DIRS) {
    await mkdir(join(root, d), { recursive: true });
    await chmod(join(root, d), mode);
  }
  await copyFile(bin, join(root, 'bin/busybox'));
  await chmod(join(root, 'bin/busybox'), 0o755);
  const applets = (await runTool(bin, ['--list-full'], { timeoutMs: 10_000 }))
    .split('\n')
    .filter((p) => p.includes('/') && p !== 'bin/busybox' && !p.includes('..'));
  for (const p of applets) {
    await mkdir(dirname(join(root, p)), { recursive: true });
    await symlink('/bin/busybox', join(root, p));
  }
  for (const [f, text, mode] of FILES) {
    await writeFile(join(root, f), text);
    await chmod(join(root, f), mode);
  }
  // Fixed times and order make the layer (and so the digest) reproducible.
  const epoch = Math.floor((await stat(bin)).mtimeMs / 1000);
  const tar = join(work, 'layer.tar');
  await runTool(
    'tar',
    [
      '--create',
      '--file',
      tar,
      '--format=gnu',
      '--numeric-owner',
      '--owner=0',
      '--group=0',
      '--sort=name',
      `--mtime=@${epoch}`,
      '-C',
      root,
      '.',
    ],
    { timeoutMs: opts.timeoutMs },
  );
  return writeOciImage(layout, {
    tag,
    layers: [tar],
    config: BUSYBOX_CONFIG,
    created: new Date(epoch * 1000).toISOString(),
  });
}
