"""Jupyter kernels (Python's ipykernel, R's IRkernel) driven with jupyter_client.

Contract (shared by kernel_jsonl.py): `start()`, `run(code, env, unset, emit)` (emit is
called with each NDJSON line as a dict; returns when the kernel is idle again),
`interrupt()`, `restart()`, `shutdown()`, `alive()`. The kernel process runs as `user`
(uid 1000) in the context's cwd, in a process group of its own; its pid is recorded under
RUN_DIR/pids so a restarted server can end kernels a dead one left behind.

`env` is applied with a silent execution before the run and `unset` (the per-run names) is
undone with one after it: the user's code is sent unchanged (its line numbers stay right)
and silent executions do not count as executions.
"""

import asyncio
import json
import logging
import os
import uuid

try:
    from jupyter_client import AsyncKernelManager
    from jupyter_client.kernelspec import KernelSpecManager
except ImportError:  # a host without Jupyter (the server's own tests): JSON-lines kernels only
    AsyncKernelManager = object
    KernelSpecManager = None

import results
from users import RUN_DIR, chown_user, kernel_env, record_pid, user_prefix

log = logging.getLogger("sandboxd-ci.jupyter")

SERVER_DIR = os.path.dirname(os.path.abspath(__file__))
STARTUP = os.path.join(SERVER_DIR, "python_startup.py")
START_TIMEOUT = 60
# How long an interrupted run may take to reach idle before its kernel is restarted.
INTERRUPT_GRACE = 10


class KernelDied(Exception):
    pass


class UserKernelManager(AsyncKernelManager):
    """Starts the kernel's argv through setpriv as `user` (see users.py)."""

    def format_kernel_cmd(self, extra_arguments=None):
        return user_prefix() + super().format_kernel_cmd(extra_arguments)

    def write_connection_file(self, **kwargs):
        """Written as root (0600), then given to `user`: the kernel must read it."""
        super().write_connection_file(**kwargs)
        if os.path.exists(self.connection_file):
            chown_user(self.connection_file)


def _py_env_code(env, unset):
    parts = ["import os as _sbx_os"]
    if env:
        parts.append(f"_sbx_os.environ.update({json.dumps(env)})")
    if unset:
        parts.append(f"[_sbx_os.environ.pop(_k, None) for _k in {json.dumps(sorted(unset))}]")
    parts.append("del _sbx_os")
    return "\n".join(parts)


def _r_env_code(env, unset):
    parts = []
    if env:
        keys = ", ".join(json.dumps(k) for k in env)
        vals = ", ".join(json.dumps(v) for v in env.values())
        parts.append(f"invisible(do.call(Sys.setenv, setNames(as.list(c({vals})), c({keys}))))")
    if unset:
        parts.append(f"invisible(Sys.unsetenv(c({', '.join(json.dumps(k) for k in sorted(unset))})))")
    return "\n".join(parts)


class JupyterKernel:
    SPECS = {"python": "python3", "r": "ir"}

    def __init__(self, language, cwd):
        self.language = language
        self.cwd = cwd
        self.km = None
        self.kc = None
        self._pump = None
        self._waiters = {}
        self._pidfile = None
        self.running = None

    @staticmethod
    def supports(language):
        if language not in JupyterKernel.SPECS or KernelSpecManager is None:
            return False
        try:
            KernelSpecManager().get_kernel_spec(JupyterKernel.SPECS[language])
            return True
        except Exception:  # noqa: BLE001
            return False

    async def start(self):
        if not os.path.isdir(self.cwd):
            raise RuntimeError(f"Failed to set working directory: {self.cwd} is not a directory")
        kdir = os.path.join(RUN_DIR, "kernels")
        os.makedirs(kdir, exist_ok=True)
        os.chmod(RUN_DIR, 0o755)
        os.chmod(kdir, 0o711)  # the kernel (as `user`) reads its own connection file only
        km = UserKernelManager(kernel_name=self.SPECS[self.language])
        km.connection_file = os.path.join(kdir, f"kernel-{uuid.uuid4().hex}.json")
        await km.start_kernel(cwd=self.cwd, env=kernel_env(), independent=False)
        self.km = km
        self._record_pid()
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=START_TIMEOUT)
        except Exception:
            await self.shutdown()
            raise
        self.kc = kc
        self._pump = asyncio.ensure_future(self._read_iopub())
        if self.language == "python":
            await self._silent(
                f"exec(open({json.dumps(STARTUP)}).read(), {{'__name__': '_sbx_startup', '__SBX_FILE__': {json.dumps(STARTUP)}}})"
            )

    def _record_pid(self):
        pid = getattr(getattr(self.km, "provisioner", None), "pid", None) or getattr(
            getattr(self.km, "kernel", None), "pid", None
        )
        if pid:
            self._pidfile = record_pid(pid)

    def _forget_pid(self):
        if self._pidfile:
            try:
                os.unlink(self._pidfile)
            except FileNotFoundError:
                pass
            self._pidfile = None

    async def alive(self):
        return self.km is not None and await self.km.is_alive()

    async def _read_iopub(self):
        while True:
            try:
                msg = await self.kc.get_iopub_msg()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001
                await asyncio.sleep(0.05)
                continue
            parent = msg.get("parent_header", {}).get("msg_id")
            q = self._waiters.get(parent)
            if q is not None:
                q.put_nowait(msg)

    async def _messages(self, msg_id):
        """Yields the iopub messages of `msg_id` until its idle status; raises KernelDied."""
        q = self._waiters[msg_id]
        while True:
            try:
                msg = await asyncio.wait_for(q.get(), timeout=1.0)
            except asyncio.TimeoutError:
                if not await self.alive():
                    raise KernelDied() from None
                continue
            if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
                return
            yield msg

    async def _silent(self, code):
        msg_id = self.kc.execute(code, silent=True, store_history=False, allow_stdin=False)
        self._waiters[msg_id] = asyncio.Queue()
        try:
            async for msg in self._messages(msg_id):
                if msg["msg_type"] == "error":
                    log.warning("%s silent code failed: %s: %s", self.language, msg["content"].get("ename"), msg["content"].get("evalue"))
        finally:
            self._waiters.pop(msg_id, None)

    def _env_code(self, env, unset):
        if not env and not unset:
            return None
        return _py_env_code(env, unset) if self.language == "python" else _r_env_code(env, unset)

    async def set_env(self, env, unset=()):
        code = self._env_code(env, unset)
        if code:
            await self._silent(code)

    async def run(self, code, emit):
        """Runs `code`; emits its outputs. Raises KernelDied when the kernel dies meanwhile."""
        msg_id = self.kc.execute(code, silent=False, store_history=True, allow_stdin=False, stop_on_error=True)
        self._waiters[msg_id] = asyncio.Queue()
        self.running = msg_id
        errored = False
        try:
            async for msg in self._messages(msg_id):
                t = msg["msg_type"]
                c = msg["content"]
                ts = msg.get("header", {}).get("date")
                ts = ts.isoformat() if hasattr(ts, "isoformat") else ts
                if t == "execute_input":
                    emit(results.execution_count(c.get("execution_count")))
                elif t == "stream":
                    emit(results.stream("stderr" if c.get("name") == "stderr" else "stdout", c.get("text", ""), ts))
                elif t == "display_data":
                    emit(results.result(c.get("data"), False))
                elif t == "execute_result":
                    emit(results.result(c.get("data"), True))
                elif t == "error" and not errored:
                    errored = True
                    emit(results.error(c.get("ename"), c.get("evalue"), c.get("traceback")))
        finally:
            self._waiters.pop(msg_id, None)
            self.running = None

    async def interrupt(self):
        if self.km is not None:
            try:
                await self.km.interrupt_kernel()
            except Exception:  # noqa: BLE001
                log.exception("interrupt failed")

    async def restart(self):
        """A new kernel process (same connection); the startup code runs again."""
        await self.shutdown()
        await self.start()

    async def shutdown(self):
        if self._pump:
            self._pump.cancel()
            self._pump = None
        if self.kc is not None:
            try:
                self.kc.stop_channels()
            except Exception:  # noqa: BLE001
                pass
            self.kc = None
        if self.km is not None:
            try:
                await self.km.shutdown_kernel(now=True)
            except Exception:  # noqa: BLE001
                log.exception("kernel shutdown failed")
            try:
                done = self.km.cleanup_resources()
                if asyncio.iscoroutine(done):
                    await done
            except Exception:  # noqa: BLE001
                pass
            self.km = None
        self._forget_pid()
        for q in self._waiters.values():
            q.put_nowait({"msg_type": "status", "content": {"execution_state": "idle"}})
