/**
 * The floor the benchmarks measure sandboxd against: bare `crun run -d` of an image's shared,
 * read-only rootfs with catatonit as PID 1, then `crun exec` (no user namespace, network,
 * seccomp, limits or disk), both started through the spawner as the driver starts its
 * programs (node's own spawn forks this whole process, which would put the bench's memory
 * size into the floor).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { OciRuntime } from '../packages/server/src/runtime/local/commands/oci-runtime.js';
import { HostSpawner } from '../packages/server/src/runtime/local/commands/spawner.js';

export class BareCrun {
  readonly runtime: OciRuntime;
  private readonly dir: string;
  private readonly config: string;

  /** A crun root and one bundle under `dir`, for the image whose rootfs is `rootfsDir`. */
  constructor(dir: string, rootfsDir: string) {
    this.runtime = new OciRuntime({ root: join(dir, 'crun'), binary: 'crun' });
    this.dir = dir;
    this.config = JSON.stringify({
      ociVersion: '1.0.2',
      process: {
        terminal: false,
        user: { uid: 0, gid: 0 },
        args: ['/dev/init', '-P'],
        env: ['PATH=/usr/local/bin:/usr/bin:/bin'],
        cwd: '/',
      },
      root: { path: rootfsDir, readonly: true },
      hostname: 'floor',
      mounts: [
        { destination: '/proc', type: 'proc', source: 'proc' },
        { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'mode=755'] },
        { destination: '/dev/init', type: 'bind', source: '/usr/bin/catatonit', options: ['rbind', 'ro'] },
      ],
      linux: {
        namespaces: [{ type: 'pid' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }, { type: 'network' }],
      },
    });
  }

  /** Starts container `id` (detached) from a bundle of its own (crun writes its pid file there). */
  run(id: string): Promise<number> {
    const bundle = join(this.dir, 'bundles', id);
    mkdirSync(bundle, { recursive: true });
    writeFileSync(join(bundle, 'config.json'), this.config);
    return this.runtime.run(id, bundle);
  }

  /** `crun exec id argv...`; throws unless it exits 0. */
  async exec(id: string, argv: string[] = ['true']): Promise<void> {
    const r = await HostSpawner.shared().run('crun', ['--root', this.runtime.root, 'exec', id, ...argv]);
    if (r.code !== 0) throw new Error(`crun exec: ${r.code} ${r.stderr.toString()}`);
  }

  delete(id: string): Promise<void> {
    return this.runtime.delete(id);
  }
}
