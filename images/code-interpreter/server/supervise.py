"""Keeps the code server running: the image's service command (label
`org.sandboxd.service.cmd`). Starts `main.py`, and when it exits for any reason starts it
again after a short back-off (0.2 s doubling to 5 s; reset after 30 s of uptime). One
supervisor per sandbox: a second one (flock on RUN_DIR/supervise.lock) exits at once.
SIGTERM/SIGINT stop the server (SIGTERM, then SIGKILL after 5 s) and the supervisor.
"""

import fcntl
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_DIR = os.environ.get("SANDBOXD_CI_RUN_DIR", "/run/sandboxd-ci")
LOG_FILE = os.environ.get("SANDBOXD_CI_LOG", "/var/log/sandboxd-ci.log")


def log(msg):
    try:
        with open(LOG_FILE, "a") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} supervise: {msg}\n")
    except OSError:
        pass


def main():
    os.makedirs(RUN_DIR, exist_ok=True)
    lock = open(os.path.join(RUN_DIR, "supervise.lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        print("sandboxd-ci supervise: already running", file=sys.stderr)
        return 0
    lock.write(str(os.getpid()))
    lock.flush()
    stopping = {"now": False}
    child = {"p": None}

    def stop(_sig, _frame):
        stopping["now"] = True
        p = child["p"]
        if p is not None and p.poll() is None:
            p.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    backoff = 0.2
    while not stopping["now"]:
        started = time.monotonic()
        devnull = open(os.devnull, "rb")
        # The server logs to LOG_FILE itself (rotated); its stdout/stderr (a crash's
        # traceback) go to a file truncated at each start, whose tail is logged on exit.
        try:
            out = open(LOG_FILE + ".out", "w+b")
        except OSError:
            out = subprocess.DEVNULL
        child["p"] = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "main.py")], stdin=devnull, stdout=out, stderr=out, cwd="/"
        )
        log(f"server started (pid {child['p'].pid})")
        while True:
            try:
                code = child["p"].wait(timeout=1)
                break
            except subprocess.TimeoutExpired:
                if stopping["now"]:
                    try:
                        code = child["p"].wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        child["p"].kill()
                        code = child["p"].wait()
                    break
        devnull.close()
        tail = b""
        if out is not subprocess.DEVNULL:
            out.seek(max(0, out.seek(0, 2) - 2048))
            tail = out.read()
            out.close()
        if stopping["now"]:
            break
        log(f"server exited ({code}); restarting in {backoff:.1f} s; its last output: {tail.decode('utf-8', 'replace')!r}")
        if time.monotonic() - started > 30:
            backoff = 0.2
        time.sleep(backoff)
        backoff = min(backoff * 2, 5.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
