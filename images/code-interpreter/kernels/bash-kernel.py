#!/usr/bin/env python3
"""sandboxd's bash kernel for the code interpreter (python3 stdlib only).

Protocol (the code server's, JSON lines): each stdin line is a request
``{"id", "code", "env", "cwd"}``; stdout carries only the events ``stdout``/``stderr``
``{"id", "type", "text"}``, ``error`` ``{"id", "type", "name", "value", "traceback"}`` and exactly
one ``end`` ``{"id", "type", "execution_count"}`` per request. Requests run one at a time.

One bash process lives as long as the kernel, so ``cd``, variables, functions, aliases and
``export`` persist from cell to cell. Each cell is written to a private file and ``source``d
by that shell with stdin from /dev/null (a command reading stdin gets EOF). Its stdout and
stderr are streamed as they come, separately. After the cell the shell writes a marker with
the cell's exit status on a private descriptor (62), so output never carries kernel text.

- A cell whose last command exits non-zero ends with an error named ``ExitCode`` whose value
  is the status (E2B's bash kernel, Jupyter's bash_kernel, sends an empty name and the status).
- ``set -e`` aborts the rest of its cell at the failing command (an ERR trap returns from the
  sourced cell) and does not outlive the cell; the shell stays.
- SIGINT to the kernel interrupts the cell (the shell is interactive, so SIGINT aborts the
  running command line as at a terminal and the shell stays): the cell ends with an error
  named ``Interrupted``.
- ``exit`` ends that shell: the cell ends with ``ExitCode`` and a new shell is started (its
  state is new).
- ``env`` is exported for the cell and undone after it; ``cwd`` (not null) is cd'ed to and stays.
"""

import codecs
import ctypes
import json
import os
import re
import secrets
import selectors
import shlex
import signal
import subprocess
import sys
import tempfile
import time

CTL_FD = 62
PR_SET_PDEATHSIG = 1
# While an interrupted cell has not ended: every RESEND_AFTER seconds, at most RESEND_MAX
# times, SIGINT again (one that lands while bash forks a command is lost: the child still has
# bash's handler, then execs) and the end-of-cell line again (the interrupt may have aborted
# it; an extra one only prints a marker nobody waits for).
RESEND_AFTER = 1.0
RESEND_MAX = 10
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# The cell returns at a failure under `set -e` (so errexit never ends the shell); at the top
# level the shell only clears errexit. errtrace (-E) makes the trap reach into functions.
ERR_TRAP = (
    "trap '__sbx_rc=$?; if [[ $- == *e* ]]; then "
    "if (( ${#BASH_SOURCE[@]} > 0 )); then return $__sbx_rc; else set +e; fi; fi' ERR"
)


def send(event):
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def log(message):
    sys.stderr.write(f"bash-kernel: {message}\n")
    sys.stderr.flush()


def hang_up_with_parent():
    """In the child before exec: SIGHUP when the kernel dies (even by SIGKILL). An interactive
    bash sends SIGHUP on to its jobs, so nothing the cell started outlives the kernel."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGHUP)
    except (OSError, AttributeError):
        pass


class Shell:
    """One interactive bash whose stdout, stderr and marker descriptor are pipes to us."""

    def __init__(self, workdir):
        self.workdir = workdir
        ctl_r, ctl_w = os.pipe()
        self.proc = subprocess.Popen(
            ["bash", "--norc", "--noprofile", "--noediting", "-i"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(ctl_w,),
            preexec_fn=hang_up_with_parent,
        )
        os.close(ctl_w)
        self.ctl = ctl_r
        self.out = self.proc.stdout.fileno()
        self.err = self.proc.stderr.fileno()
        for fd in (self.ctl, self.out, self.err):
            os.set_blocking(fd, False)
        self.decoders = {
            self.out: codecs.getincrementaldecoder("utf-8")(errors="replace"),
            self.err: codecs.getincrementaldecoder("utf-8")(errors="replace"),
        }
        self.ctl_buf = b""
        mark = secrets.token_hex(8)
        self.write(
            "set +m +H +o history -E; PS1=''; PS2=''; PS0=''; PROMPT_COMMAND=''; "
            "unset HISTFILE\n"
            f"{ERR_TRAP}\n"
            f"exec {CTL_FD}>&{ctl_w}; exec {ctl_w}>&-\n"
            f"printf '%s 0\\n' {mark} >&{CTL_FD}\n"
        )
        # Start-up chatter (no job control, prompts) is dropped up to the first marker.
        self.run_until(mark, on_output=lambda _kind, _text: None, deadline=time.monotonic() + 30)

    def write(self, text):
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()

    def interrupt(self):
        """SIGINT to the kernel's process group: bash and the command it runs in the foreground
        (the kernel's own handler ignores it; background jobs ignore SIGINT)."""
        os.killpg(os.getpgrp(), signal.SIGINT)

    def read(self, fd, on_output):
        """Reads what fd has now; returns False at EOF."""
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        if fd == self.ctl:
            self.ctl_buf += chunk
            return True
        text = self.decoders[fd].decode(chunk)
        if text:
            on_output("stdout" if fd == self.out else "stderr", text)
        return True

    def drain(self, on_output):
        for fd in (self.out, self.err):
            for _ in range(1024):
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                text = self.decoders[fd].decode(chunk)
                if text:
                    on_output("stdout" if fd == self.out else "stderr", text)

    def take_mark(self, mark):
        """The status after `mark` in the marker stream, or None when not there yet."""
        while b"\n" in self.ctl_buf:
            line, self.ctl_buf = self.ctl_buf.split(b"\n", 1)
            parts = line.decode(errors="replace").split()
            if len(parts) == 2 and parts[0] == mark:
                return int(parts[1])
        return None

    def run_until(self, mark, on_output, deadline=None, on_idle=None):
        """Streams output until `mark` arrives; returns its status, or None if bash died."""
        sel = selectors.DefaultSelector()
        for fd in (self.ctl, self.out, self.err):
            sel.register(fd, selectors.EVENT_READ)
        try:
            while True:
                status = self.take_mark(mark)
                if status is not None:
                    self.drain(on_output)
                    return status
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError("bash did not start")
                for key, _ in sel.select(timeout=0.25):
                    if not self.read(key.fd, on_output):
                        sel.unregister(key.fd)
                        if key.fd == self.ctl:
                            self.drain(on_output)
                            return None
                if on_idle:
                    on_idle()
        finally:
            sel.close()

    def close(self):
        """Reaps a shell that has ended and closes its pipes."""
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass
        os.close(self.ctl)


def others_in_group():
    """Whether a process other than this one is in this process group (from /proc)."""
    me, group = os.getpid(), os.getpgrp()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if len(fields) > 2 and int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


def end_group(shell):
    """Ends the shell and everything the cells started (all in this process group): SIGHUP
    (what a terminal's hang-up does), then SIGKILL to what is left, this process included."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    os.killpg(os.getpgrp(), signal.SIGHUP)
    try:
        shell.proc.wait(2)
    except subprocess.TimeoutExpired:
        pass
    if shell.proc.poll() is not None and not others_in_group():
        return
    sys.stdout.flush()
    os.killpg(os.getpgrp(), signal.SIGKILL)


class Kernel:
    def __init__(self):
        # The kernel leads its own process group (the code server starts it in a new session):
        # its SIGINT reaches the cell's command, and the server's SIGKILL to the group ends it all.
        if os.getpgrp() != os.getpid():
            os.setpgid(0, 0)
        self.workdir = tempfile.mkdtemp(prefix="sandboxd-bash-kernel-")
        self.shell = Shell(self.workdir)
        self.count = 0
        self.running = None  # {"interrupted": bool, "at": float, "resends": int}
        signal.signal(signal.SIGINT, self.on_sigint)

    def on_sigint(self, _signum, _frame):
        if self.running is not None and not self.running["interrupted"]:
            self.running["interrupted"] = True
            self.running["at"] = time.monotonic()
            self.shell.interrupt()

    def execute(self, req):
        rid = req.get("id")
        code = req.get("code") if isinstance(req.get("code"), str) else ""
        env = req.get("env") if isinstance(req.get("env"), dict) else {}
        cwd = req.get("cwd")
        self.count += 1

        def output(kind, text):
            send({"id": rid, "type": kind, "text": text})

        def error(name, value):
            send({"id": rid, "type": "error", "name": name, "value": value, "traceback": []})

        if isinstance(cwd, str) and cwd and not os.path.isdir(cwd):
            error("Error", f"cannot change directory to {cwd}: no such directory")
            return send({"id": rid, "type": "end", "execution_count": self.count})

        mark = secrets.token_hex(8)
        cell = os.path.join(self.workdir, f"cell-{self.count}.sh")
        with open(cell, "w", encoding="utf-8") as f:
            f.write(code if code.endswith("\n") else code + "\n")

        # env: saved with one `declare -p` (one fork, however many names), exported for the cell,
        # then unset and the saved declarations evaluated back.
        names = []
        pre, post = [], []
        for name, value in env.items():
            if not NAME_RE.match(name) or value is None:
                output("stderr", f"bash-kernel: env var {name!r} skipped (not a shell name)\n")
                continue
            names.append((name, str(value)))
        if names:
            listed = " ".join(n for n, _ in names)
            pre.append(f"__sbx_env=$(declare -p {listed} 2>/dev/null)")
            pre.append("export " + " ".join(f"{n}={shlex.quote(v)}" for n, v in names))
            # Guarded: a resent end-of-cell line must not undo it twice.
            post.append(
                f'if [[ -v __sbx_env ]]; then unset -v {listed}; eval "$__sbx_env"; unset -v __sbx_env; fi'
            )
        end_line = (
            "__sbx_rc=$?; set +e; " + "".join(f"{p}; " for p in post)
            + f"printf '%s %s\\n' {mark} \"$__sbx_rc\" >&{CTL_FD}\n"
        )
        script = "".join(f"{p}\n" for p in pre)
        script += f"source {shlex.quote(cell)} </dev/null\n" + end_line

        self.running = {"interrupted": False, "at": 0.0, "resends": 0}

        def on_idle():
            r = self.running
            if (
                r["interrupted"]
                and r["resends"] < RESEND_MAX
                and time.monotonic() - r["at"] > RESEND_AFTER * (r["resends"] + 1)
            ):
                r["resends"] += 1
                self.shell.interrupt()
                self.shell.write(end_line)

        try:
            self.shell.write(script)
            status = self.shell.run_until(mark, output, on_idle=on_idle)
        except (BrokenPipeError, OSError):
            status = None
        interrupted = self.running["interrupted"]
        self.running = None
        try:
            os.unlink(cell)
        except OSError:
            pass

        if status is None:
            died = self.shell.proc.wait()
            self.shell.close()
            output("stderr", f"bash exited (status {died}); a new shell is started\n")
            error("ExitCode", str(died if died >= 0 else 128 - died))
            self.shell = Shell(self.workdir)
        elif interrupted:
            error("Interrupted", "Execution interrupted")
        elif status != 0:
            error("ExitCode", str(status))
        send({"id": rid, "type": "end", "execution_count": self.count})

    def serve(self):
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                req = json.loads(line)
            except ValueError:
                log(f"ignored a request that is not JSON: {line[:200]!r}")
                continue
            if not isinstance(req, dict) or "id" not in req:
                log(f"ignored a request without an id: {line[:200]!r}")
                continue
            self.execute(req)


def main():
    # SIGTERM/SIGHUP end the kernel cleanly (the finally below ends the shell).
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda _s, _f: sys.exit(0))
    kernel = Kernel()
    try:
        kernel.serve()
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        try:
            for name in os.listdir(kernel.workdir):
                os.unlink(os.path.join(kernel.workdir, name))
            os.rmdir(kernel.workdir)
        except OSError:
            pass
        end_group(kernel.shell)


if __name__ == "__main__":
    main()
