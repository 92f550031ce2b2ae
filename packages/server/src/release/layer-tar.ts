/**
 * Reproducible layer tars for the release image: GNU tar over a staged tree with every
 * property that drifts between machines and checkouts pinned (entry order, mtimes, owners,
 * group/other permission bits, pax atime/ctime, hard links).
 */
import { execFileSync } from 'node:child_process';

/**
 * Writes `entries` (paths relative to `dir`, their subtrees included) of `dir` to the tar
 * file `out`: entries sorted by name, every mtime `epoch` (seconds), owner and group 0 by
 * number with no names, group and other given the owner's bits less write (a checkout made
 * with umask 002 or 077 packs as one made with 022), no atime/ctime, hard links stored as
 * files. The same tree (names, contents, owner modes, symlink targets) gives the same bytes.
 */
export function writeLayerTar(dir: string, entries: string[], out: string, epoch: number): void {
  execFileSync(
    'tar',
    [
      '--create',
      '--file',
      out,
      '--sort=name',
      '--format=posix',
      '--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime',
      `--mtime=@${epoch}`,
      '--owner=0',
      '--group=0',
      '--numeric-owner',
      '--mode=go=u-w',
      '--hard-dereference',
      '-C',
      dir,
      '--',
      ...[...entries].sort(),
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
}
