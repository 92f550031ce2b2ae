"""Calls syscalls that container escapes use, straight through libc's syscall(); prints
{name: errno} as JSON (0 = the call succeeded). x86_64 numbers."""
import ctypes, json, os, socket

def _refuse_on_host():
    """These probes attack the machine they run on: only ever inside a sandbox, whose root is
    an unprivileged uid of the host (a uid_map not starting with "0 0"), or inside gVisor,
    whose user-space kernel shows its own identity map and names itself Linux 4.4.0 of
    "#1 SMP Sun Jan 10 15:06:54 PST 2016" (a host kernel never does)."""
    with open('/proc/self/uid_map') as f:
        first = f.read().split()
    u = os.uname()
    gvisor = u.release == '4.4.0' and u.version.startswith('#1 SMP Sun Jan 10 15:06:54 PST 2016')
    if first[:2] == ['0', '0'] and not gvisor:
        raise SystemExit('refusing to run outside a sandbox')


_refuse_on_host()

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def call(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return 0 if r >= 0 else ctypes.get_errno()


CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x2000000, 0x4000000, 0x8000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, SIGCHLD = 0x10000000, 0x20000000, 0x40000000, 17
buf = ctypes.create_string_buffer(4096)
tmp = b'/tmp/escape-probe-node'
out = {}
# mount and friends, on real arguments
out['mount tmpfs'] = call(165, b'none', b'/mnt', b'tmpfs', 0, 0)
out['mount bind /'] = call(165, b'/', b'/mnt', 0, 0x1000, 0)  # MS_BIND
out['mount proc'] = call(165, b'proc', b'/mnt', b'proc', 0, 0)
out['mount cgroup'] = call(165, b'cgroup', b'/mnt', b'cgroup', 0, b'memory')
out['remount / rw'] = call(165, b'', b'/proc/sys', 0, 0x20 | 0x1000, 0)  # MS_REMOUNT|MS_BIND
out['umount2 /proc/sys'] = call(166, b'/proc/sys', 2)  # MNT_DETACH
out['umount2 /sys'] = call(166, b'/sys', 2)
out['pivot_root'] = call(155, b'/tmp', b'/tmp')
out['chroot'] = call(161, b'/tmp')
out['open_tree'] = call(428, -100, b'/', 1)
out['fsopen'] = call(430, b'tmpfs', 0)
out['fspick'] = call(433, -100, b'/', 0)
out['move_mount'] = call(429, -100, b'/tmp', -100, b'/mnt', 0)
out['mount_setattr'] = call(442, -100, b'/', 0, 0, 0)
# namespaces
for name, flags in [('NEWUSER', CLONE_NEWUSER), ('NEWNS', CLONE_NEWNS), ('NEWNET', CLONE_NEWNET), ('NEWPID', CLONE_NEWPID),
                    ('NEWUTS', CLONE_NEWUTS), ('NEWIPC', CLONE_NEWIPC), ('NEWCGROUP', CLONE_NEWCGROUP)]:
    out[f'unshare {name}'] = call(272, flags)
    # clone with a namespace flag; a child that is created exits at once
    r = libc.syscall(ctypes.c_long(56), ctypes.c_long(flags | SIGCHLD), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
    if r == 0:
        os._exit(0)
    if r > 0:
        os.waitpid(r, 0)
        out[f'clone {name}'] = 0
    else:
        out[f'clone {name}'] = ctypes.get_errno()
out['clone3'] = call(435, 0, 0)
try:
    fd = os.open('/proc/self/ns/mnt', os.O_RDONLY)
except OSError as e:
    out['setns own mnt'] = e.errno  # gVisor: no /proc/<pid>/ns files, nothing to enter
else:
    out['setns own mnt'] = call(308, fd, 0)
    os.close(fd)
# kernel modules, kexec, keyrings, bpf, perf, userfaultfd, io_uring
out['init_module'] = call(175, buf, 16, b'')
fd = os.open('/bin/true' if os.path.exists('/bin/true') else '/bin/sh', os.O_RDONLY)
out['finit_module'] = call(313, fd, b'', 0)
os.close(fd)
out['delete_module'] = call(176, b'ext4', 0)
out['kexec_load'] = call(246, 0, 0, 0, 0)
out['kexec_file_load'] = call(320, -1, -1, 0, b'', 0)
out['add_key'] = call(248, b'user', b'escape', b'payload', 7, -4)  # KEY_SPEC_USER_KEYRING... -4 = USER
out['keyctl get_keyring_id'] = call(250, 0, -3, 0)  # KEYCTL_GET_KEYRING_ID(SESSION)
out['keyctl join_session'] = call(250, 1, 0)  # KEYCTL_JOIN_SESSION_KEYRING
out['request_key'] = call(249, b'user', b'escape', 0, 0)
bpf_attr = ctypes.create_string_buffer(128)
ctypes.memmove(bpf_attr, (ctypes.c_uint32 * 4)(2, 4, 4, 1), 16)  # BPF_MAP_CREATE array 4/4/1
out['bpf map_create'] = call(321, 0, bpf_attr, 128)
perf_attr = ctypes.create_string_buffer(128)
ctypes.memmove(perf_attr, (ctypes.c_uint32 * 2)(1, 128), 8)  # PERF_TYPE_SOFTWARE, size
out['perf_event_open'] = call(298, perf_attr, 0, -1, -1, 0)
out['userfaultfd'] = call(323, 0)
out['io_uring_setup'] = call(425, 4, buf)
out['fanotify_init'] = call(300, 0, 0)
out['open_by_handle_at'] = call(304, -100, buf, 0)
out['name_to_handle_at'] = call(303, -100, b'/', buf, buf, 0)
out['lookup_dcookie'] = call(212, 0, buf, 16)
# devices, raw I/O, time, reboot, swap, kernel log, accounting, quotas
out['mknod block'] = call(133, tmp, 0o60600, os.makedev(8, 0))
out['mknod char mem'] = call(133, tmp, 0o20600, os.makedev(1, 1))
out['mknod char kmsg'] = call(259, -100, tmp, 0o20600, os.makedev(1, 11))
out['iopl'] = call(172, 3)
out['ioperm'] = call(173, 0x70, 2, 1)
out['settimeofday'] = call(164, 0, 0)
out['clock_settime'] = call(227, 0, (ctypes.c_long * 2)(0, 0))
out['adjtimex set'] = call(159, (ctypes.c_int * 64)(0x0001))
out['reboot'] = call(169, 0xfee1dead, 672274793, 0x4321fedc, 0)  # RB_POWER_OFF
out['swapon'] = call(167, b'/tmp', 0)
out['syslog read'] = call(103, 3, buf, 4096)  # SYSLOG_ACTION_READ_ALL
out['acct'] = call(163, b'/tmp/acct')
out['quotactl'] = call(179, 0x800002, b'/dev/vda', 0, 0)
out['sethostname'] = call(170, b'escaped', 7)
out['vhangup'] = call(153)
pid = os.fork()  # allowed: inside the sandbox only; in a child, as a tracee stops on every signal
if pid == 0:
    os._exit(call(101, 0, 0, 0, 0))
out['ptrace traceme'] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
# raw and packet sockets (CAP_NET_RAW is dropped)
for name, fam, typ, proto in [('socket packet raw', 17, 3, 0x0300), ('socket inet raw icmp', 2, 3, 1), ('socket inet raw tcp', 2, 3, 6), ('socket inet6 raw', 10, 3, 58)]:
    try:
        s = socket.socket(fam, typ, proto)
        s.close()
        out[name] = 0
    except OSError as e:
        out[name] = e.errno
# vsock reaches the hypervisor and the host's vsock services, outside every network namespace
for name, fam in [('socket vsock stream', socket.SOCK_STREAM), ('socket vsock dgram', socket.SOCK_DGRAM)]:
    try:
        socket.socket(40, fam).close()
        out[name] = 0
    except OSError as e:
        out[name] = e.errno
out['socket vsock, family + 2^32'] = call(41, (1 << 32) + 40, 1, 0)
# the same from 32-bit x86 code: socketcall(SYS_SOCKET) and i386 socket(); exit code = errno,
# 253 = fd 3 (a socket was made)
import struct, subprocess
def elf32(code):
    base = 0x08048000
    return struct.pack('<16sHHIIIIIHHHHHH', b'\x7fELF\x01\x01\x01' + b'\0' * 9, 2, 3, 1, base + 84, 52, 0, 0, 52, 32, 1, 0, 0, 0) + \
        struct.pack('<IIIIIIII', 1, 0, base, base, 84 + len(code), 84 + len(code), 5, 0x1000) + code
exit_neg_eax = bytes.fromhex('f7d889c3b801000000cd80')
progs = {
    'i386 socketcall vsock': bytes.fromhex('6a006a016a2889e1bb01000000b866000000cd80') + exit_neg_eax,
    'i386 socket vsock': bytes.fromhex('bb28000000b90100000031d2b867010000cd80') + exit_neg_eax,
    'i386 socket inet (allowed)': bytes.fromhex('bb02000000b90100000031d2b867010000cd80') + exit_neg_eax,
}
for name, code in progs.items():
    path = '/tmp/escape-elf32'
    with open(path, 'wb') as f:
        f.write(elf32(code))
    os.chmod(path, 0o755)
    try:
        out[name] = subprocess.run([path]).returncode
    except OSError as e:
        out[name] = 'exec errno %d' % e.errno
    os.unlink(path)
try:
    os.unlink(tmp)
except OSError:
    pass
print(json.dumps(out))
