"""Checks every process visible in the sandbox: each fd, cwd and root that names a path must
be that very file inside the sandbox (same device and inode when the path is looked up
here); anything else was opened outside the sandbox and leaked in. Argument (optional):
base64 JSON {"cd_fds": true} to also `chdir` through each directory fd of this process.
Prints {"procs": n, "links": n, "leaks": [...], "self_cwd": ..., "seen": {...}}."""
import base64, json, os, stat, sys

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

opts = json.loads(base64.b64decode(sys.argv[1])) if len(sys.argv) > 1 else {}
leaks, seen, links, procs = [], {}, 0, 0
root_st = os.stat('/')


def same(a, b):
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def check(link, kind, pid):
    global links
    try:
        target = os.readlink(link)
    except OSError:
        return
    links += 1
    seen.setdefault(kind, set()).add(target if not target.startswith(('socket:', 'pipe:', 'anon_inode:')) else target.split(':')[0])
    if not target.startswith('/'):
        return  # socket:[..], pipe:[..], anon_inode:..
    if target.endswith(' (deleted)'):
        return
    try:
        real = os.stat(link)  # follows the magic link to the object itself
    except OSError:
        return  # raced away
    try:
        here = os.stat(target)
    except OSError as e:
        leaks.append({'pid': pid, 'kind': kind, 'link': link, 'target': target, 'why': 'path does not exist in the sandbox: ' + str(e.errno)})
        return
    if not same(real, here):
        leaks.append({'pid': pid, 'kind': kind, 'link': link, 'target': target, 'why': 'another file than the same path in the sandbox'})


for p in sorted(os.listdir('/proc')):
    if not p.isdigit():
        continue
    procs += 1
    base = f'/proc/{p}'
    try:
        fds = os.listdir(base + '/fd')
    except OSError:
        fds = []
    for n in fds:
        check(f'{base}/fd/{n}', 'fd', p)
    check(base + '/cwd', 'cwd', p)
    try:
        if not same(os.stat(base + '/root'), root_st):
            leaks.append({'pid': p, 'kind': 'root', 'link': base + '/root', 'target': os.readlink(base + '/root'), 'why': 'root is not the sandbox root'})
    except OSError:
        pass

cd = []
if opts.get('cd_fds'):
    start = os.open('.', os.O_RDONLY)
    for n in sorted(os.listdir('/proc/self/fd'), key=int):
        path = f'/proc/self/fd/{n}'
        try:
            os.chdir(path)
        except OSError as e:
            cd.append([n, 'refused:' + str(e.errno)])
            continue
        try:
            cwd = os.getcwd()
            ok = same(os.stat('.'), os.stat(cwd))
        except OSError as e:
            cwd, ok = 'getcwd failed: ' + str(e.errno), False
        cd.append([n, cwd, ok])
        if not ok:
            leaks.append({'pid': 'self', 'kind': 'cd', 'link': path, 'target': cwd, 'why': 'chdir through the fd left the sandbox'})
        os.fchdir(start)

try:
    cwd = os.getcwd()
    cwd_ok = same(os.stat('.'), os.stat(cwd))
except OSError as e:
    cwd, cwd_ok = 'getcwd failed: ' + str(e.errno), False
if not cwd_ok:
    leaks.append({'pid': 'self', 'kind': 'cwd', 'link': '.', 'target': cwd, 'why': 'cwd is not the same path inside the sandbox'})
print(json.dumps({'procs': procs, 'links': links, 'leaks': leaks, 'self_cwd': cwd, 'cd': cd,
                  'seen': {k: sorted(v)[:60] for k, v in seen.items()}}))
