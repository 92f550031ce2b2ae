import { chmodSync, existsSync, mkdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Isolation } from '@sandboxd/protocol';
import { agentBinary } from '../commands/exec-agent.js';
import { hostOnlyCgroupPaths, type OciRuntimeName } from '../commands/oci-runtime.js';
import { hostNetDevicePaths } from '../network/sysfs.js';
import { cgroupsPath } from './cgroups.js';
import { writeEtcFiles } from './etc-files.js';
import { type BundleOptions, buildOciConfig, MASKED_PATHS, SANDBOX_CAPABILITIES } from './oci-config.js';
import { buildSeccompProfile, compileSeccompBpf, type OciSeccomp } from './seccomp.js';

/**
 * What one sandbox's bundle is made from (see {@link BundleOptions}); `net` is a network made
 * before start, which the sandbox joins, or null: the runtime makes one.
 */
export type SandboxBundle = Pick<
  BundleOptions,
  'id' | 'hostname' | 'rootfs' | 'env' | 'limits' | 'uidBase' | 'volumes' | 'allowSetuid'
> & {
  net: { address: string; netnsPath: string } | null;
  /** `gvisor`: a bundle for runsc (see BundleOptions.gvisor); absent: the container tier's runtime. */
  isolation?: Isolation;
};

/**
 * runsc mounts a tmpfs of its own over an image's empty /tmp: files there would live in the
 * sandbox's memory and be gone after a stop or a snapshot, unlike a container's /tmp, which
 * is part of its root layer. A bind of the root layer's own /tmp keeps them there.
 */
function gvisorTmp(rootfs: string): BundleOptions['volumes'] {
  const tmp = join(rootfs, 'tmp');
  return existsSync(tmp)
    ? [{ destination: '/tmp', type: 'bind', source: tmp, options: ['rbind', 'nosuid', 'nodev'] }]
    : [];
}

/**
 * The profile as gVisor enforces it: `clone3` allowed. runsc answers EPERM for every
 * refused call whatever its errno, so the ENOSYS that makes libc fall back to `clone` (whose
 * namespace flags the profile checks) would stop every thread from starting; gVisor's own
 * clone3 gives ENOSYS or checks the flags itself, and a namespace made there is gVisor's.
 */
function gvisorSeccomp(p: OciSeccomp): OciSeccomp {
  return {
    ...p,
    syscalls: p.syscalls.map((r) => (r.names.includes('clone3') ? { names: r.names, action: 'SCMP_ACT_ALLOW' } : r)),
  };
}

/**
 * Writes sandbox bundles (config.json and the /etc files it binds in) for one host and OCI
 * runtime, each in its own folder `<dir>/<container id>/`. `dir` lies in the instance's run
 * dir (a tmpfs, see run-dir.ts): a bundle is needed only while its container runs, and
 * making and deleting its files on a disk cost each create more than the floor's whole
 * `crun run`. What every bundle shares is found once, in {@link init}.
 */
export class BundleWriter {
  private host:
    | {
        seccomp: OciSeccomp;
        seccompBpfBase64?: string;
        maskedNetPaths: string[];
        agentPath: string;
        /** Masked paths that are directories on this host (they are hidden by a bind, see write()). */
        maskedDirs: string[];
      }
    | undefined;

  constructor(
    private readonly o: {
      /** Folder of the bundles' folders. */
      dir: string;
      runtime: OciRuntimeName;
      /** cgroup folder of every sandbox's cgroup. */
      cgroupParent: string;
      /** Instance key, marked on every container (see INSTANCE_ANNOTATION). */
      instance: string;
      /** The sandboxes' resolver (the gateway address), named in every resolv.conf. */
      nameserver: string;
    },
  ) {}

  /**
   * Resolves the seccomp profile (and compiles it to BPF for crun; runc compiles the profile
   * itself), lists the host's network device folders in /sys and builds the exec agent.
   * Synchronous and slow (runs compilers): call once, at driver init. Throws when a helper
   * does not compile or the profile cannot be read.
   */
  init(): void {
    const seccomp = buildSeccompProfile({ capabilities: SANDBOX_CAPABILITIES });
    const seccompBpfBase64 = this.o.runtime === 'crun' ? compileSeccompBpf(seccomp).toString('base64') : undefined;
    const maskedNetPaths = hostNetDevicePaths();
    // Hierarchies where a sandbox has no cgroup of its own show the host's root group: hidden.
    const hostCgroups = this.o.runtime === 'crun' ? hostOnlyCgroupPaths() : [];
    // /sys is the host's (bound) and /proc shows the same kernel: what is a directory here is one there.
    const maskedDirs = [...MASKED_PATHS, ...maskedNetPaths, ...hostCgroups].filter((p) => {
      try {
        return statSync(p).isDirectory();
      } catch {
        return false;
      }
    });
    this.host = { seccomp, seccompBpfBase64, maskedNetPaths, agentPath: agentBinary(), maskedDirs };
  }

  /** Folder of the bundles' folders. */
  get dir(): string {
    return this.o.dir;
  }

  /** The bundle folder of container `id`. */
  dirOf(id: string): string {
    return join(this.o.dir, id);
  }

  /**
   * Writes container `b.id`'s bundle into {@link dirOf} (made if missing): its /etc files,
   * then config.json. Returns the folder and `setAddress`, which puts an address known only
   * after start (runc) into /etc/hosts. Synchronous: the bundles are on the run dir's tmpfs,
   * where the ~7 calls take tens of microseconds, against ~0.8 ms through the thread pool.
   */
  write(b: SandboxBundle): { dir: string; setAddress: (address: string) => void } {
    const host = this.host!;
    const dir = this.dirOf(b.id);
    mkdirSync(dir, { recursive: true });
    const etc = writeEtcFiles(dir, b.hostname, b.net?.address ?? '', this.o.nameserver);
    // The empty directory bound read-only over masked directories (owned by host root, so
    // nobody in the sandbox can write it).
    const empty = join(dir, 'masked');
    mkdirSync(empty, { recursive: true });
    chmodSync(empty, 0o555);
    const gvisor = b.isolation === 'gvisor';
    const config = buildOciConfig({
      id: b.id,
      instance: this.o.instance,
      hostname: b.hostname,
      rootfs: b.rootfs,
      env: b.env,
      limits: b.limits,
      uidBase: b.uidBase,
      netnsPath: b.net?.netnsPath,
      hostSysfs: b.net !== null && !gvisor,
      maskedNetPaths: gvisor ? [] : host.maskedNetPaths,
      // runc refuses mounts inside /proc: it keeps the tmpfs masks (runsc: its /proc is its own).
      maskDirsWith:
        this.o.runtime === 'crun' && !gvisor
          ? {
              dir: empty,
              paths: host.maskedDirs.filter(
                (p) => b.net !== null || MASKED_PATHS.includes(p) || p.startsWith('/sys/fs/cgroup/'),
              ),
            }
          : undefined,
      agentPath: host.agentPath,
      etcFiles: etc.files,
      volumes: gvisor ? [...gvisorTmp(b.rootfs), ...b.volumes] : b.volumes,
      seccomp: gvisor ? gvisorSeccomp(host.seccomp) : host.seccomp,
      // runsc enforces the OCI form itself (--oci-seccomp), not crun's BPF.
      seccompBpfBase64: gvisor ? undefined : host.seccompBpfBase64,
      cgroupsPath: cgroupsPath(this.o.cgroupParent, b.id),
      allowSetuid: b.allowSetuid,
      gvisor,
    });
    writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
    return { dir, setAddress: etc.setAddress };
  }

  /**
   * Rewrites the /etc files of the bundle of `id` (a warm-pooled sandbox claimed: its new
   * hostname, at its address), in place: the running sandbox has them bound in.
   */
  writeEtc(id: string, hostname: string, address: string): void {
    writeEtcFiles(this.dirOf(id), hostname, address, this.o.nameserver);
  }

  /**
   * Moves the bundle of container `from` to the folder of `to` (a warm-pooled sandbox
   * claimed). Synchronous: one rename on the run dir's tmpfs, on a claim's critical path.
   */
  move(from: string, to: string): void {
    renameSync(this.dirOf(from), this.dirOf(to));
  }

  /**
   * Drops what the bundle of running container `id` no longer needs: under crun its
   * config.json, of which crun keeps its own copy in its state dir (the run dir is a tmpfs:
   * every page kept there is memory). The /etc files stay: the sandbox has them bound in.
   */
  shed(id: string, isolation?: Isolation): void {
    // runsc's checkpoint and restore read the bundle again: kept.
    if (this.o.runtime === 'crun' && isolation !== 'gvisor')
      rmSync(join(this.dirOf(id), 'config.json'), { force: true });
  }

  /** Removes the bundle of container `id`, if any. */
  remove(id: string): Promise<void> {
    return rm(this.dirOf(id), { recursive: true, force: true });
  }
}
