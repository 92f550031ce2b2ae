"""Calls each syscall of a list once with every argument -1 (invalid fds, pointers, flags),
each in a child process of its own (bounded by alarm(2)), and prints {name: errno} as JSON
(0 = it succeeded, -n = the child died of signal n). Argument: base64 JSON [[name, nr], ...].
test/security/tier-probes.ts --syscalls passes every call the seccomp profile allows and
compares the tiers' answers. Only inside a sandbox (see syscalls.py)."""
import ctypes, json, os, signal, sys, base64
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
with open('/proc/self/uid_map') as f:
    first = f.read().split()
_u = os.uname()
if first[:2] == ['0', '0'] and not (_u.release == '4.4.0' and _u.version.startswith('#1 SMP Sun Jan 10 15:06:54 PST 2016')):
    raise SystemExit('refusing to run outside a sandbox')
calls = json.loads(base64.b64decode(sys.argv[1]))
out = {}
for name, nr in calls:
    pid = os.fork()
    if pid == 0:
        signal.alarm(2)
        r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(-1)] * 6)
        os._exit(0 if r >= 0 else min(ctypes.get_errno(), 250))
    _, st = os.waitpid(pid, 0)
    out[name] = os.waitstatus_to_exitcode(st)
print(json.dumps(out))
