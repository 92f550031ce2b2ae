import type { ResourceLimits } from '../../driver.js';
import { AGENT_PATH } from '../commands/exec-agent.js';
import type { OciSeccomp } from './seccomp.js';
import { CPU_PERIOD_US, cpuQuotaUs } from './cgroups.js';

/**
 * Capabilities a sandbox's processes keep (bounding = effective = permitted). Docker's
 * default set without NET_RAW (raw sockets, spoofing), MKNOD (device nodes) and
 * SYS_CHROOT. All of them are confined to the sandbox's user namespace.
 */
export const SANDBOX_CAPABILITIES = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_FOWNER',
  'CAP_FSETID',
  'CAP_KILL',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETPCAP',
  'CAP_NET_BIND_SERVICE',
  'CAP_SETFCAP',
  'CAP_AUDIT_WRITE',
];

/** Paths of /proc and /sys hidden from sandboxes (as runc/podman do, plus a few more). */
export const MASKED_PATHS = [
  '/proc/acpi',
  '/proc/asound',
  '/proc/kcore',
  '/proc/keys',
  '/proc/latency_stats',
  '/proc/timer_list',
  '/proc/timer_stats',
  '/proc/sched_debug',
  '/proc/scsi',
  '/proc/kallsyms',
  '/proc/interrupts',
  '/proc/config.gz',
  '/sys/firmware',
  '/sys/devices/virtual/powercap',
  '/sys/kernel',
  '/sys/fs/selinux',
  '/sys/dev/block',
  // Block devices are host-wide: each loop device names its backing file (another sandbox's
  // root or an account's volume, under the host's data dir), and their I/O counters show
  // what other sandboxes do.
  '/sys/block',
  '/sys/class/block',
  '/sys/devices/virtual/block',
  '/sys/class/bdi',
  '/sys/devices/virtual/bdi',
  '/sys/fs/ext4',
  '/proc/diskstats',
  '/proc/partitions',
];
export const READONLY_PATHS = ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'];

/**
 * Host tasks a gVisor sandbox needs beside its own processes, added to its pids limit: the
 * limit caps its host cgroup, where the user-space kernel's threads (~40-80 measured, more
 * while a checkpoint is restored) and, on the ptrace platform, a stub process per address
 * space of the sandbox are counted; not the sandbox's processes as such.
 */
export const GVISOR_HOST_TASKS = 256;

/** Size of each sandbox's uid/gid range. */
export const ID_RANGE_SIZE = 65536;

/**
 * OCI annotation naming the instance (its key, see instance.ts) that made a container:
 * recovery and teardown touch only containers that carry their own key.
 */
export const INSTANCE_ANNOTATION = 'org.sandboxd.instance';

export interface BundleMount {
  destination: string;
  type: string;
  source: string;
  options: string[];
}

export interface BundleOptions {
  id: string;
  /** Key of the instance making the sandbox, written as the {@link INSTANCE_ANNOTATION}. */
  instance: string;
  hostname: string;
  rootfs: string;
  /** KEY=VALUE, image env then sandbox env, already merged. */
  env: string[];
  limits: ResourceLimits;
  /** Host uid/gid that sandbox uid/gid 0 maps to. */
  uidBase: number;
  /** Network namespace to join (made and owned by the host); unset: the runtime makes one. */
  netnsPath?: string;
  /**
   * Bind the host's /sys (read-only, recursively) instead of mounting a new sysfs, which is
   * impossible when the netns belongs to the host; `maskedNetPaths` then hide its devices.
   */
  hostSysfs?: boolean;
  maskedNetPaths?: string[];
  /**
   * Masked paths that are directories, hidden by a read-only bind of the empty directory
   * `dir` instead of the runtime's usual tmpfs each: a tmpfs is a file system instance of its
   * own, and every instance alive costs every memory cgroup of the host kernel memory (its
   * shrinker slot), so a dozen per sandbox made each sandbox cost more the more there are.
   */
  maskDirsWith?: { dir: string; paths: string[] };
  /**
   * Host path of the static exec agent (native/exec-agent.c), bound read-only at
   * /dev/sandboxd-agent; it is PID 1 (`--init`) and runs the sandbox's commands.
   */
  agentPath: string;
  /** Host files bound read-only over /etc/hosts, /etc/hostname, /etc/resolv.conf. */
  etcFiles: { hosts: string; hostname: string; resolv?: string };
  /** Volume binds (sources already idmapped for this sandbox), as OCI mount entries. */
  volumes: BundleMount[];
  seccomp: OciSeccomp;
  /** The same profile precompiled to BPF, base64; crun loads it instead of compiling `seccomp`. */
  seccompBpfBase64?: string;
  /** cgroup path relative to each hierarchy's root. */
  cgroupsPath: string;
  /** No no_new_privs: setuid programs lift their caller to the sandbox's root (../setuid.ts). */
  allowSetuid?: boolean;
  /**
   * gVisor (runsc): /proc, /sys and /dev are the user-space kernel's own, not the host's, so
   * /sys is its sysfs (never a bind of the host's); it has no cgroupfs or mqueue mount.
   */
  gvisor?: boolean;
}

/**
 * The OCI runtime config of a sandbox: its own pid, mount, uts, ipc, cgroup, network and
 * user namespaces; the exec agent as PID 1 (an init that reaps orphans and runs commands); seccomp; a reduced capability set;
 * no_new_privs (unless `allowSetuid`); masked and read-only /proc and /sys paths; memory, CPU and pid limits.
 */
export function buildOciConfig(o: BundleOptions): Record<string, unknown> {
  const caps = SANDBOX_CAPABILITIES;
  const ro = ['rbind', 'ro', 'nosuid', 'nodev', 'noexec'];
  const mounts: BundleMount[] = [
    { destination: '/proc', type: 'proc', source: 'proc', options: ['nosuid', 'noexec', 'nodev'] },
    // /dev/shm is a directory of this tmpfs (made by the agent at init, mode 1777), not a
    // tmpfs of its own: one file system instance less per sandbox (see maskDirsWith). Both
    // are 64 MiB, charged to the sandbox's memory cgroup. noexec and nodev are as /dev/shm
    // had them; the nodes and the agent bound over files here keep their own mounts' flags.
    {
      destination: '/dev',
      type: 'tmpfs',
      source: 'tmpfs',
      options: ['nosuid', 'noexec', 'nodev', 'strictatime', 'mode=755', 'size=65536k'],
    },
    {
      destination: '/dev/pts',
      type: 'devpts',
      source: 'devpts',
      options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620'],
    },
    ...(o.gvisor
      ? [{ destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] }]
      : [
          { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
          o.hostSysfs
            ? {
                destination: '/sys',
                type: 'bind',
                source: '/sys',
                options: ['rbind', 'rro', 'nosuid', 'noexec', 'nodev'],
              }
            : { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
          {
            destination: '/sys/fs/cgroup',
            type: 'cgroup',
            source: 'cgroup',
            options: ['nosuid', 'noexec', 'nodev', 'relatime', 'ro'],
          },
        ]),
    { destination: AGENT_PATH, type: 'bind', source: o.agentPath, options: ['rbind', 'ro', 'nosuid', 'nodev'] },
    { destination: '/etc/hosts', type: 'bind', source: o.etcFiles.hosts, options: ro },
    { destination: '/etc/hostname', type: 'bind', source: o.etcFiles.hostname, options: ro },
  ];
  if (o.etcFiles.resolv)
    mounts.push({ destination: '/etc/resolv.conf', type: 'bind', source: o.etcFiles.resolv, options: ro });
  mounts.push(...o.volumes);
  const boundMasks = new Set(o.maskDirsWith?.paths ?? []);
  for (const d of boundMasks)
    mounts.push({ destination: d, type: 'bind', source: o.maskDirsWith!.dir, options: [...ro.slice(1), 'bind'] });
  const masked = o.hostSysfs && !o.gvisor ? [...MASKED_PATHS, ...(o.maskedNetPaths ?? [])] : MASKED_PATHS;
  return {
    ociVersion: '1.0.2',
    process: {
      terminal: false,
      user: { uid: 0, gid: 0 },
      args: [AGENT_PATH, '--init'],
      env: o.env,
      cwd: '/',
      capabilities: { bounding: caps, effective: caps, permitted: caps, inheritable: [], ambient: [] },
      rlimits: [{ type: 'RLIMIT_NOFILE', hard: 16384, soft: 16384 }],
      noNewPrivileges: o.allowSetuid !== true,
      oomScoreAdj: 500,
    },
    root: { path: o.rootfs, readonly: false },
    hostname: o.hostname,
    annotations: {
      [INSTANCE_ANNOTATION]: o.instance,
      ...(o.seccompBpfBase64 ? { 'run.oci.seccomp_bpf_data': o.seccompBpfBase64 } : {}),
    },
    mounts,
    linux: {
      uidMappings: [{ containerID: 0, hostID: o.uidBase, size: ID_RANGE_SIZE }],
      gidMappings: [{ containerID: 0, hostID: o.uidBase, size: ID_RANGE_SIZE }],
      namespaces: [
        { type: 'pid' },
        { type: 'ipc' },
        { type: 'uts' },
        { type: 'mount' },
        { type: 'cgroup' },
        { type: 'user' },
        o.netnsPath ? { type: 'network', path: o.netnsPath } : { type: 'network' },
      ],
      resources: {
        devices: [{ allow: false, access: 'rwm' }],
        memory: { limit: o.limits.memoryBytes, swap: o.limits.memoryBytes },
        cpu: { quota: cpuQuotaUs(o.limits.cpus), period: CPU_PERIOD_US },
        pids: { limit: o.gvisor ? o.limits.pids + GVISOR_HOST_TASKS : o.limits.pids },
      },
      cgroupsPath: o.cgroupsPath,
      // crun loads the precompiled filter of the annotation and ignores this section: not
      // written then (8 KiB less in each of the two copies of config.json a sandbox keeps).
      ...(o.seccompBpfBase64 ? {} : { seccomp: o.seccomp }),
      maskedPaths: masked.filter((p) => !boundMasks.has(p)),
      readonlyPaths: READONLY_PATHS,
    },
  };
}
