"""Kernels that speak JSON lines on stdin/stdout (JavaScript, TypeScript, bash: kernels/).

Same contract as kernel_jupyter.JupyterKernel. Protocol (docs/code-interpreter.md):
request `{"id", "code", "env", "cwd"}`; events `stdout`/`stderr` {text}, `result`
{data, main}, `error` {name, value, traceback}, then one `end` {execution_count}. SIGINT
interrupts the running request. The kernel applies `env` for that request only, so the
sandbox's envs are sent with every request (per-run ones win).
"""

import asyncio
import json
import logging
import os
import signal

import results
from users import kernel_env, record_pid, user_prefix

log = logging.getLogger("sandboxd-ci.jsonl")

KERNELS_DIR = os.environ.get(
    "SANDBOXD_CI_KERNELS_DIR", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernels")
)

ARGV = {
    "javascript": lambda d: ["/usr/bin/node", os.path.join(d, "js-kernel.mjs")],
    "typescript": lambda d: ["/usr/bin/node", os.path.join(d, "js-kernel.mjs"), "--typescript"],
    "bash": lambda d: ["/usr/bin/python3", os.path.join(d, "bash-kernel.py")],
}
SCRIPTS = {"javascript": "js-kernel.mjs", "typescript": "js-kernel.mjs", "bash": "bash-kernel.py"}


class KernelDied(Exception):
    pass


class JsonlKernel:
    def __init__(self, language, cwd, argv=None):
        self.language = language
        self.cwd = cwd
        self.argv = argv
        self.proc = None
        self._next = 0
        self._events = None
        self._reader = None
        self._stderr = None
        self._pidfile = None
        self.pending_env = {}
        self.running = None

    @staticmethod
    def supports(language):
        return language in SCRIPTS and os.path.exists(os.path.join(KERNELS_DIR, SCRIPTS[language]))

    async def start(self):
        if not os.path.isdir(self.cwd):
            raise RuntimeError(f"Failed to set working directory: {self.cwd} is not a directory")
        argv = self.argv or ARGV[self.language](KERNELS_DIR)
        self.proc = await asyncio.create_subprocess_exec(
            *user_prefix(),
            *argv,
            cwd=self.cwd,
            env=kernel_env(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            limit=64 * 1024 * 1024,
        )
        self._pidfile = record_pid(self.proc.pid)
        self._events = asyncio.Queue()
        self._reader = asyncio.ensure_future(self._read(self.proc, self._events))
        self._stderr = asyncio.ensure_future(self._log_stderr(self.proc))

    async def _read(self, proc, q):
        while True:
            line = await proc.stdout.readline()
            if not line:
                q.put_nowait(None)
                return
            try:
                ev = json.loads(line)
                if not isinstance(ev, dict):
                    raise ValueError("not an object")
            except ValueError:
                log.warning("%s kernel printed a line that is not an event: %r", self.language, line[:200])
                continue
            q.put_nowait(ev)

    async def _log_stderr(self, proc):
        while True:
            line = await proc.stderr.readline()
            if not line:
                return
            log.info("%s kernel: %s", self.language, line.decode("utf-8", "replace").rstrip())

    async def alive(self):
        return self.proc is not None and self.proc.returncode is None

    async def set_env(self, env, unset=()):
        # Applied by the kernel per request: remembered and sent with the next run.
        self.pending_env = dict(env)

    async def run(self, code, emit, env=None):
        if not await self.alive():
            raise KernelDied()
        self._next += 1
        rid = self._next
        req = {"id": rid, "code": code, "env": env or {}, "cwd": None}
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode("utf-8"))
            await self.proc.stdin.drain()
        except (ConnectionError, BrokenPipeError):
            raise KernelDied() from None
        self.running = rid
        errored = False
        try:
            while True:
                ev = await self._events.get()
                if ev is None:
                    raise KernelDied()
                if ev.get("id") != rid:
                    continue
                t = ev.get("type")
                if t in ("stdout", "stderr"):
                    emit(results.stream(t, ev.get("text", "")))
                elif t == "result":
                    emit(results.result(ev.get("data"), ev.get("main", False)))
                elif t == "error" and not errored:
                    errored = True
                    emit(results.error(ev.get("name"), ev.get("value"), ev.get("traceback")))
                elif t == "end":
                    if ev.get("execution_count") is not None:
                        emit(results.execution_count(ev["execution_count"]))
                    return
        finally:
            self.running = None

    async def interrupt(self):
        if await self.alive():
            try:
                self.proc.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass

    async def restart(self):
        await self.shutdown()
        await self.start()

    async def shutdown(self):
        proc, self.proc = self.proc, None
        if proc is not None and proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except asyncio.TimeoutError:
                log.warning("%s kernel %d did not exit after SIGKILL", self.language, proc.pid)
        for t in (self._reader, self._stderr):
            if t:
                t.cancel()
        if self._pidfile:
            try:
                os.unlink(self._pidfile)
            except FileNotFoundError:
                pass
            self._pidfile = None
