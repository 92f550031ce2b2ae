/**
 * The floor the benchmarks measure sandboxd against: bare `crun run -d` of an image's shared,
 * read-only rootfs with catatonit as PID 1, then `crun exec` (no user namespace, network,
 * seccomp, limits or disk), both started through the spawner as the driver starts its
 * programs (node's own spawn forks this whole process, which would put the bench's memory
 * size into the floor). BareRunsc is the same for gVisor: bare `runsc run` of the same
 * bundle, then `runsc exec`.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type GvisorPlatform, gvisorPlatform } from '../packages/server/src/runtime/gvisor/runsc.js';
import { OciRuntime } from '../packages/server/src/runtime/local/commands/oci-runtime.js';
import { HostSpawner } from '../packages/server/src/runtime/local/commands/spawner.js';

/** The floor's OCI config: the image's rootfs read-only, catatonit as PID 1, no limits. */
function floorConfig(rootfsDir: string): string {
  return JSON.stringify({
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

export class BareCrun {
  readonly runtime: OciRuntime;
  private readonly dir: string;
  private readonly config: string;

  /** A crun root and one bundle under `dir`, for the image whose rootfs is `rootfsDir`. */
  constructor(dir: string, rootfsDir: string) {
    this.runtime = new OciRuntime({ root: join(dir, 'crun'), binary: 'crun' });
    this.dir = dir;
    this.config = floorConfig(rootfsDir);
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

/**
 * The gVisor floor: bare `runsc run --detach` of the same bundle as {@link BareCrun} (the
 * image's shared rootfs read-only, catatonit as PID 1) with `--network=none` on the
 * platform the driver would use, then `runsc exec`; no user namespace, limits, disk or
 * launcher (sandboxd's runsc calls go through one for their network: oci-runtime.ts).
 */
export class BareRunsc {
  readonly root: string;
  readonly platform: GvisorPlatform;
  private readonly dir: string;
  private readonly config: string;
  private readonly started = new Set<string>();

  /** A runsc root and one bundle per container under `dir`, for the image whose rootfs is `rootfsDir`. */
  constructor(dir: string, rootfsDir: string, platform: GvisorPlatform = gvisorPlatform()) {
    this.dir = dir;
    this.root = join(dir, 'runsc');
    this.platform = platform;
    this.config = floorConfig(rootfsDir);
  }

  private get argv(): string[] {
    return ['--root', this.root, `--platform=${this.platform}`, '--network=none'];
  }

  /** Starts container `id` (detached); resolves to the sandbox's host pid. */
  async run(id: string): Promise<number> {
    const bundle = join(this.dir, 'bundles', id);
    mkdirSync(bundle, { recursive: true });
    writeFileSync(join(bundle, 'config.json'), this.config);
    const pidFile = join(bundle, 'init.pid');
    this.started.add(id);
    const r = await HostSpawner.shared().run(
      'runsc',
      [
        ...this.argv,
        '--log',
        join(bundle, 'runsc.log'),
        'run',
        '--detach',
        '--pid-file',
        pidFile,
        '--bundle',
        bundle,
        id,
      ],
      { quiet: true, timeoutMs: 60_000 },
    );
    if (r.code !== 0)
      throw new Error(`runsc run ${id}: ${r.code} ${readFileSync(join(bundle, 'runsc.log'), 'utf8').slice(-500)}`);
    return Number(readFileSync(pidFile, 'utf8').trim());
  }

  /** `runsc exec id argv...`; throws unless it exits 0. */
  async exec(id: string, argv: string[] = ['true']): Promise<void> {
    const r = await HostSpawner.shared().run('runsc', [...this.argv, 'exec', id, ...argv], { timeoutMs: 60_000 });
    if (r.code !== 0) throw new Error(`runsc exec: ${r.code} ${r.stderr.toString()}`);
  }

  async delete(id: string): Promise<void> {
    const r = await HostSpawner.shared().run('runsc', [...this.argv, 'delete', '--force', id], { timeoutMs: 60_000 });
    if (r.code !== 0) throw new Error(`runsc delete ${id}: ${r.code} ${r.stderr.toString()}`);
    this.started.delete(id);
    rmSync(join(this.dir, 'bundles', id), { recursive: true, force: true });
  }

  /** Deletes every container this floor started and not yet deleted (a failed run's too). */
  async deleteAll(): Promise<void> {
    for (const id of [...this.started]) await this.delete(id).catch(() => undefined);
  }
}
