import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { nativeBin } from '../native.js';

/** Where Debian's containers-common ships the seccomp profile podman uses. */
export const CONTAINERS_SECCOMP_PROFILE = '/usr/share/containers/seccomp.json';

/**
 * Syscalls no sandbox may make, whatever the base profile allows: new namespaces and
 * mount-API calls (a nested user namespace hands out fresh capabilities over a large
 * kernel surface), keyrings (shared per host uid), BPF, perf, userfaultfd, module and
 * kexec calls, swap and clock changes, and the remaining kernel-wide knobs. Each fails
 * with EPERM.
 */
export const ALWAYS_DENIED = [
  'unshare',
  'setns',
  'mount',
  'umount',
  'umount2',
  'pivot_root',
  'chroot',
  'open_tree',
  'move_mount',
  'fsopen',
  'fsconfig',
  'fsmount',
  'fspick',
  'mount_setattr',
  'keyctl',
  'add_key',
  'request_key',
  'bpf',
  'perf_event_open',
  'userfaultfd',
  'fanotify_init',
  'lookup_dcookie',
  'init_module',
  'finit_module',
  'delete_module',
  'kexec_load',
  'kexec_file_load',
  'swapon',
  'swapoff',
  'reboot',
  'acct',
  'quotactl',
  'quotactl_fd',
  'clock_settime',
  'clock_settime64',
  'settimeofday',
  'clock_adjtime',
  'clock_adjtime64',
  'adjtimex',
  'iopl',
  'ioperm',
  'syslog',
  'vhangup',
  'nfsservctl',
  'open_by_handle_at',
  'name_to_handle_at',
];

/**
 * AF_VSOCK (40): a socket to the hypervisor (CID 2) and to the host's own vsock services.
 * vsock belongs to no network namespace, so no firewall rule of the sandbox network applies:
 * `socket(AF_VSOCK, ...)` answers EAFNOSUPPORT, as on a kernel without it. Every other
 * family stays allowed (capabilities still gate raw and packet sockets). Families are
 * compared as whole 64-bit values (the kernel truncates `domain` to an int, so a rule of the
 * form "allow unless 40" would let 2^32 + 40 through): 0..39 and 41..AF_MAX-1 only.
 */
export const AF_VSOCK = 40;
const AF_MAX = 46;
const EAFNOSUPPORT = 97;
/**
 * i386's socketcall(2) carries socket's arguments in memory, out of seccomp's sight: its
 * SYS_SOCKET call (1) is refused, the others allowed, and with crun i386's own socket(2)
 * allows no family at all (libseccomp ties the two; see compileSeccompBpf). 32-bit x86
 * programs cannot create sockets in a sandbox; 64-bit ones are unaffected.
 */
const SYS_SOCKET = 1;

/** clone/clone3 flags that create namespaces; a clone asking for any of them fails. */
const CLONE_NAMESPACE_FLAGS = 0x7e020000; // CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET

interface SourceRule {
  names: string[];
  action: string;
  args?: { index: number; value: number; valueTwo?: number; op: string }[] | null;
  includes?: { caps?: string[]; arches?: string[]; minKernel?: string };
  excludes?: { caps?: string[]; arches?: string[] };
  errnoRet?: number;
}

export interface OciSeccomp {
  defaultAction: string;
  defaultErrnoRet?: number;
  architectures: string[];
  syscalls: {
    names: string[];
    action: string;
    errnoRet?: number;
    args?: { index: number; value: number; valueTwo: number; op: string }[];
  }[];
}

/**
 * Converts a podman/docker-format seccomp profile into the OCI runtime form for x86_64,
 * resolving `includes`/`excludes` against the sandbox's capability set, then applies
 * {@link ALWAYS_DENIED} and the namespace-flag filter on clone. Pure apart from reading
 * the profile file.
 */
export function buildSeccompProfile(opts: { capabilities: string[]; profilePath?: string }): OciSeccomp {
  const src = JSON.parse(readFileSync(opts.profilePath ?? CONTAINERS_SECCOMP_PROFILE, 'utf8')) as {
    defaultAction: string;
    defaultErrnoRet?: number;
    syscalls: SourceRule[];
  };
  const caps = new Set(opts.capabilities);
  const arch = 'amd64';
  const denied = new Set(ALWAYS_DENIED);
  const out: OciSeccomp['syscalls'] = [];
  for (const rule of src.syscalls) {
    const inc = rule.includes ?? {};
    const exc = rule.excludes ?? {};
    if (inc.arches?.length && !inc.arches.includes(arch)) continue;
    if (exc.arches?.includes(arch)) continue;
    if (inc.caps?.length && !inc.caps.every((c) => caps.has(c))) continue;
    if (exc.caps?.some((c) => caps.has(c))) continue;
    const names = rule.names.filter(
      (n) =>
        !denied.has(n) &&
        n !== 'socket' &&
        n !== 'socketcall' &&
        !(rule.action === 'SCMP_ACT_ALLOW' && (n === 'clone' || n === 'clone3')),
    );
    if (names.length === 0) continue;
    const entry: OciSeccomp['syscalls'][number] = { names, action: rule.action };
    if (rule.errnoRet !== undefined) entry.errnoRet = rule.errnoRet;
    if (rule.args?.length)
      entry.args = rule.args.map((a) => ({ index: a.index, value: a.value, valueTwo: a.valueTwo ?? 0, op: a.op }));
    out.push(entry);
  }
  // clone: allowed only without namespace flags (flags are argument 0 on x86_64).
  out.push({
    names: ['clone'],
    action: 'SCMP_ACT_ALLOW',
    args: [{ index: 0, value: CLONE_NAMESPACE_FLAGS, valueTwo: 0, op: 'SCMP_CMP_MASKED_EQ' }],
  });
  // socket: every address family but AF_VSOCK (see AF_VSOCK), which falls to the default
  // action; socketcall: all but SYS_SOCKET. (compileSeccompBpf adds an explicit refusal.)
  out.push({
    names: ['socket'],
    action: 'SCMP_ACT_ALLOW',
    args: [{ index: 0, value: AF_VSOCK, valueTwo: 0, op: 'SCMP_CMP_LT' }],
  });
  for (let family = AF_VSOCK + 1; family < AF_MAX; family++) {
    out.push({
      names: ['socket'],
      action: 'SCMP_ACT_ALLOW',
      args: [{ index: 0, value: family, valueTwo: 0, op: 'SCMP_CMP_EQ' }],
    });
  }
  out.push({
    names: ['socketcall'],
    action: 'SCMP_ACT_ALLOW',
    args: [{ index: 0, value: SYS_SOCKET, valueTwo: 0, op: 'SCMP_CMP_GT' }],
  });
  // clone3 passes flags in a struct seccomp cannot read: make libc fall back to clone.
  out.push({ names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: 38 /* ENOSYS */ });
  out.push({ names: [...denied], action: 'SCMP_ACT_ERRNO', errnoRet: 1 /* EPERM */ });
  return {
    defaultAction: src.defaultAction,
    defaultErrnoRet: src.defaultErrnoRet ?? 1,
    architectures: ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32'],
    syscalls: out,
  };
}

/**
 * Compiles `profile` to the raw BPF program (with libseccomp, as crun would), for crun's
 * `run.oci.seccomp_bpf_data` annotation: crun then loads it as is instead of compiling the
 * profile again for every sandbox, which costs ~15 ms of each start here. Synchronous; call
 * once at start-up. Throws for an action other than allow/errno.
 */
export function compileSeccompBpf(profile: OciSeccomp): Buffer {
  const act = (action: string, errno: number | undefined) => {
    if (action === 'SCMP_ACT_ALLOW') return 'allow 0';
    if (action === 'SCMP_ACT_ERRNO') return `errno ${errno ?? 1}`;
    throw new Error(`seccomp action ${action} cannot be precompiled`);
  };
  // First of all, the AF_VSOCK refusal with its own errno: on i386, libseccomp makes the first
  // rule on `socket` the rule of socketcall(SYS_SOCKET) too, whose family it cannot see, so
  // 32-bit code cannot get a vsock through socketcall (see native/seccomp-bpf.c). It is not in
  // the OCI profile: runc compiles that in one filter for all three architectures, where this
  // rule and the allows collide on i386, which runc refuses (so under runc, 32-bit code keeps
  // socketcall(SYS_SOCKET) for every family).
  const lines = [
    `default ${act(profile.defaultAction, profile.defaultErrnoRet)}`,
    `rule socket errno ${EAFNOSUPPORT} 1 0 EQ ${AF_VSOCK} 0`,
  ];
  for (const rule of profile.syscalls) {
    const args = (rule.args ?? []).map((a) => `${a.index} ${a.op.replace('SCMP_CMP_', '')} ${a.value} ${a.valueTwo}`);
    for (const name of rule.names)
      lines.push(`rule ${name} ${act(rule.action, rule.errnoRet)} ${args.length} ${args.join(' ')}`.trimEnd());
  }
  return execFileSync(nativeBin('seccomp-bpf'), { input: `${lines.join('\n')}\n`, maxBuffer: 16 * 1024 * 1024 });
}
