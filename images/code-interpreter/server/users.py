"""Who kernels run as, with what environment, and where the server keeps its state.

Kernels run as `user` (uid/gid from /etc/passwd, 1000 in the image) like E2B's, with
HOME=/home/user; when the image has no such account (or the server is not root) they run
as the server's own user. `SANDBOXD_CI_RUN_DIR` moves the state dir (tests on a host).
"""

import os
import pwd

RUN_DIR = os.environ.get("SANDBOXD_CI_RUN_DIR", "/run/sandboxd-ci")
USER = os.environ.get("SANDBOXD_CI_USER", "user")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def account():
    """(uid, gid, home) of the kernels' user, or None to run as the server's own."""
    if os.geteuid() != 0:
        return None
    try:
        pw = pwd.getpwnam(USER)
    except KeyError:
        return None
    return pw.pw_uid, pw.pw_gid, pw.pw_dir


def user_prefix():
    """argv prefix that starts a program as the kernels' user (setpriv, util-linux)."""
    acc = account()
    if acc is None:
        return []
    uid, gid, _ = acc
    return ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups", "--"]


def chown_user(path):
    acc = account()
    if acc is not None:
        os.chown(path, acc[0], acc[1])


def default_cwd():
    acc = account()
    return acc[2] if acc else os.environ.get("HOME", "/")


def kernel_env():
    """The environment a kernel process starts with (sandbox envs are applied per run)."""
    acc = account()
    env = {
        "PATH": PATH,
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    if acc is not None:
        env.update({"HOME": acc[2], "USER": USER, "LOGNAME": USER, "SHELL": "/bin/bash"})
    else:
        for k in ("HOME", "USER", "LOGNAME", "SHELL"):
            if k in os.environ:
                env[k] = os.environ[k]
    return env


def _start_time(pid):
    """The process's start time (clock ticks since boot, /proc/<pid>/stat field 22), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def record_pid(pid):
    """Notes a kernel process under RUN_DIR/pids (name: pid, content: its start time); returns the file."""
    d = os.path.join(RUN_DIR, "pids")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, str(pid))
    with open(path, "w") as f:
        f.write(_start_time(pid) or "")
    return path


def recorded_pid_alive(path):
    """The pid of a file written by record_pid if that very process still runs, else None."""
    try:
        pid = int(os.path.basename(path))
        with open(path) as f:
            want = f.read().strip()
    except (OSError, ValueError):
        return None
    return pid if want and _start_time(pid) == want else None
