"""What one isolation tier allows and the other denies: each probe prints what happened
(errno 0 = the call succeeded, else its errno, or a short observation). Prints one JSON
object {probe: answer} last. x86_64 numbers. Run as the sandbox's root
(test/security/tier-probes.ts runs it in a container and a gVisor sandbox side by side)."""
import ctypes, errno, json, os, socket, struct, subprocess

# Only inside a sandbox: a uid_map not starting with "0 0", or gVisor's own kernel.
with open('/proc/self/uid_map') as f:
    first = f.read().split()
_u = os.uname()
if first[:2] == ['0', '0'] and not (_u.release == '4.4.0' and _u.version.startswith('#1 SMP Sun Jan 10 15:06:54 PST 2016')):
    raise SystemExit('refusing to run outside a sandbox')

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def call(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return 0 if r >= 0 else ctypes.get_errno()


def fd_call(nr, *args):
    """A call that returns an fd: 0 and the fd closed when it worked, else the errno."""
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if r >= 0:
        os.close(r)
        return 0
    return ctypes.get_errno()


def sock(*a):
    try:
        socket.socket(*a).close()
        return 0
    except OSError as e:
        return e.errno


def sh(cmd):
    r = subprocess.run(['sh', '-c', cmd], capture_output=True, text=True, timeout=20)
    text = (r.stdout.strip() or r.stderr.strip()).splitlines()
    return (text[-1] if text else '')[:100] + ('' if r.returncode == 0 else ' (exit %d)' % r.returncode)


def read(path, n=200):
    try:
        with open(path) as f:
            return f.read(n).strip()
    except OSError as e:
        return 'errno %d' % e.errno


def count(path):
    try:
        return len(os.listdir(path))
    except OSError as e:
        return 'errno %d' % e.errno


out = {}
out['uname -r'] = os.uname().release
out['uname -v'] = os.uname().version[:60]
# sockets
out['socket inet raw icmp'] = sock(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
out['socket packet raw'] = sock(17, socket.SOCK_RAW, 0)
out['socket inet dgram icmp (ping socket)'] = sock(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
out['socket netlink route'] = sock(16, socket.SOCK_RAW, 0)
out['socket netlink audit'] = sock(16, socket.SOCK_RAW, 9)
out['socket netlink kobject_uevent'] = sock(16, socket.SOCK_DGRAM, 15)
out['socket inet sctp'] = sock(socket.AF_INET, socket.SOCK_STREAM, 132)
out['socket alg (kernel crypto)'] = sock(38, socket.SOCK_SEQPACKET, 0)
out['socket inet6 stream'] = sock(socket.AF_INET6, socket.SOCK_STREAM, 0)
# ptrace inside the sandbox
pid = os.fork()
if pid == 0:
    import time
    time.sleep(5)
    os._exit(0)
out['ptrace attach own child'] = call(101, 16, pid, 0, 0)  # PTRACE_ATTACH
os.kill(pid, 9)
os.waitpid(pid, 0)
out['strace true'] = sh('command -v strace >/dev/null || { echo no strace; exit 0; }; strace -o /dev/null true && echo ok')
# kernel interfaces
out['io_uring_setup'] = call(425, 4, ctypes.create_string_buffer(120))
bpf_attr = ctypes.create_string_buffer(128)
ctypes.memmove(bpf_attr, (ctypes.c_uint32 * 4)(2, 4, 4, 1), 16)
out['bpf map_create'] = call(321, 0, bpf_attr, 128)
perf_attr = ctypes.create_string_buffer(128)
ctypes.memmove(perf_attr, (ctypes.c_uint32 * 2)(1, 128), 8)
out['perf_event_open'] = fd_call(298, perf_attr, 0, -1, -1, 0)
out['userfaultfd'] = fd_call(323, 0)
out['fanotify_init'] = fd_call(300, 0, 0)
out['inotify_init1'] = fd_call(294, 0)
out['memfd_create'] = fd_call(319, b'x', 0)
out['keyctl get session keyring'] = call(250, 0, -3, 0)
out['syslog read (dmesg)'] = call(103, 10, 0, 0)  # SYSLOG_ACTION_SIZE_BUFFER
out['dmesg | head -1'] = sh('dmesg 2>&1 | head -1')
out['unshare NEWUSER'] = call(272, 0x10000000)
out['unshare NEWNS'] = call(272, 0x20000)
out['mount tmpfs'] = call(165, b'none', b'/mnt', b'tmpfs', 0, 0)
out['chroot /tmp'] = call(161, b'/tmp')
out['personality READ_IMPLIES_EXEC'] = 0 if libc.personality(0x0400000) >= 0 else ctypes.get_errno()
libc.personality(0)
out['prctl seccomp filter (own)'] = sh("python3 -c 'import ctypes;l=ctypes.CDLL(None,use_errno=True);print(l.prctl(38,1,0,0,0), l.prctl(22,2,0,0,0), ctypes.get_errno())'")
out['mq_open'] = sh("python3 -c 'import ctypes;l=ctypes.CDLL(\"librt.so.1\",use_errno=True);r=l.mq_open(b\"/probe\",0o100|2,0o600,None);print(r, ctypes.get_errno())'")
out['sysv shmget'] = call(29, 0, 4096, 0o1000 | 0o600)
out['O_DIRECT open on /tmp'] = sh("dd if=/dev/zero of=/tmp/odirect bs=4096 count=1 oflag=direct 2>&1 | tail -1; rm -f /tmp/odirect")
out['setxattr user.x on /tmp file'] = sh("touch /tmp/xa && python3 -c 'import os;os.setxattr(\"/tmp/xa\",\"user.x\",b\"1\");print(os.getxattr(\"/tmp/xa\",\"user.x\"))'; rm -f /tmp/xa")
out['mknod fifo'] = sh('mkfifo /tmp/ff && echo ok; rm -f /tmp/ff')
out['mlock 64 MiB'] = sh("python3 -c 'import ctypes,mmap;l=ctypes.CDLL(None,use_errno=True);m=mmap.mmap(-1,64<<20);b=ctypes.c_char.from_buffer(m);print(l.mlock(ctypes.addressof(b),64<<20), ctypes.get_errno())'")
# what /proc and /sys show
out['/proc/cpuinfo processors'] = sh("grep -c ^processor /proc/cpuinfo")
out['/proc/meminfo MemTotal'] = sh("grep MemTotal /proc/meminfo")
out['nproc'] = sh('nproc')
out['/proc/self/mountinfo lines'] = sh('wc -l < /proc/self/mountinfo')
out['/proc/1/cmdline'] = read('/proc/1/cmdline').replace('\0', ' ')
out['/proc/sys/kernel/hostname'] = read('/proc/sys/kernel/hostname')
out['/proc/sys entries'] = count('/proc/sys')
out['/proc/sys/net/ipv4/ip_forward'] = read('/proc/sys/net/ipv4/ip_forward')
out['/proc/sys/net/ipv4/ip_forward write'] = sh('echo 1 > /proc/sys/net/ipv4/ip_forward && echo written')
out['/proc/modules'] = sh('wc -l < /proc/modules')
out['/proc/kallsyms'] = read('/proc/kallsyms', 40)
out['/proc/self/status Seccomp'] = sh("grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status | tr '\\n' ' '")
out['/sys entries'] = count('/sys')
out['/sys/class/net'] = ' '.join(sorted(os.listdir('/sys/class/net'))) if os.path.isdir('/sys/class/net') else 'absent'
out['/sys/fs/cgroup'] = count('/sys/fs/cgroup')
out['/sys/block'] = count('/sys/block')
out['/dev entries'] = ' '.join(sorted(os.listdir('/dev')))
out['/dev/net/tun open'] = sh("python3 -c 'import os;os.close(os.open(\"/dev/net/tun\",os.O_RDWR));print(\"opened\")'")
out['/dev/fuse open'] = sh("python3 -c 'import os;os.close(os.open(\"/dev/fuse\",os.O_RDWR));print(\"opened\")'")
out['ip link'] = sh("ip -o link 2>&1 | awk '{print $2}' | tr '\\n' ' '")
out['ip route default'] = sh("ip route 2>&1 | head -1")
out['ping -c1 -W2 gateway'] = sh("command -v ping >/dev/null || { echo no ping; exit 0; }; ping -c1 -W2 $(ip route | awk '/default/ {print $3}') >/dev/null 2>&1 && echo answered || echo no answer")
out['df /'] = sh("df -h / | tail -1 | awk '{print $1, $2}'")
out['/tmp filesystem'] = sh("stat -f -c %T /tmp")
out['/ filesystem'] = sh("stat -f -c %T /")
# what programs of a Debian image meet
out['python thread'] = sh("python3 -c 'import threading; t = threading.Thread(target=print, args=(\"ok\",)); t.start(); t.join()' 2>&1 | tail -1")
out['clone3 (glibc pthread_create)'] = call(435, 0, 0)
out['select() (pselect6)'] = sh("python3 -c 'import select; print(select.select([], [], [], 0))' 2>&1 | tail -1")
out['poll()'] = sh("python3 -c 'import select; p = select.poll(); print(p.poll(0))' 2>&1 | tail -1")
out['ls /'] = sh('ls / >/dev/null && echo ok')
out['stat / (coreutils)'] = sh('stat -c %F / 2>&1')
out['statx AT_NO_AUTOMOUNT'] = call(332, -100, b'/', 0x800, 0x7ff, ctypes.create_string_buffer(256))
out['find / -maxdepth 1'] = sh('find / -maxdepth 1 | wc -l')
print(json.dumps(out))
