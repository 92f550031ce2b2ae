"""Contexts: one kernel each, runs serialized per context, parallel across contexts.

A context is `{id, language, cwd}`. Its kernel starts lazily (the default Python one at
server start) and is started again when found dead. The list of contexts, and which one is
each language's default, is kept in RUN_DIR/contexts.json so a restarted server still has
them (with new kernels: their state is gone).

`Context.execute()` is an async generator of NDJSON line dicts. Closing it early (the client
went away) or reaching its timeout interrupts the run; the context stays locked until the
kernel is idle again (or, if it does not get there within INTERRUPT_GRACE, restarted), so
the next run is never stuck behind an abandoned one.
"""

import asyncio
import json
import logging
import os
import signal
import uuid

import envs
import results
from kernel_jsonl import JsonlKernel
from kernel_jupyter import JupyterKernel
from users import RUN_DIR, default_cwd, recorded_pid_alive

log = logging.getLogger("sandboxd-ci.contexts")

INTERRUPT_GRACE = 10
KEEPALIVE_S = 5
STATE = os.path.join(RUN_DIR, "contexts.json")
ALIASES = {"js": "javascript", "ts": "typescript", "py": "python", "python3": "python", "sh": "bash", "R": "r"}


class UnknownLanguage(Exception):
    pass


def normalize_language(language):
    """E2B's normalisation (lower-case, trimmed; js, ts) plus a few aliases; None -> python."""
    if not language:
        return "python"
    language = language.strip()
    language = ALIASES.get(language, language).lower()
    return ALIASES.get(language, language)


def kernel_class(language):
    for cls in (JupyterKernel, JsonlKernel):
        if cls.supports(language):
            return cls
    return None


class Context:
    def __init__(self, cid, language, cwd):
        self.id = cid
        self.language = language
        self.cwd = cwd
        cls = kernel_class(language)
        if cls is None:
            raise UnknownLanguage(language)
        self.kernel = cls(language, cwd)
        self.started = False
        self.lock = asyncio.Lock()
        self.applied = {}  # sandbox envs applied to the kernel (Jupyter kernels only)
        self._start_lock = asyncio.Lock()

    def describe(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    async def ensure_started(self):
        async with self._start_lock:
            if self.started and await self.kernel.alive():
                return
            if self.started:
                log.warning("context %s: kernel found dead, starting a new one", self.id)
                await self.kernel.shutdown()
            self.started = False
            self.applied = {}
            await self.kernel.start()
            self.started = True

    async def restart(self):
        async with self.lock:
            async with self._start_lock:
                await self.kernel.shutdown()
                self.started = False
                self.applied = {}
            await self.ensure_started()

    async def close(self):
        await self.kernel.shutdown()
        self.started = False

    async def _run(self, code, env_vars, emit):
        """Runs with the sandbox's envs (from envs.json) and `env_vars` for this run only."""
        sandbox = envs.current()
        if isinstance(self.kernel, JsonlKernel):
            await self.kernel.run(code, emit, {**sandbox, **env_vars})
            return
        changed = {k: v for k, v in sandbox.items() if self.applied.get(k) != v}
        gone = [k for k in self.applied if k not in sandbox and k not in env_vars]
        await self.kernel.set_env({**changed, **env_vars}, gone)
        self.applied = dict(sandbox)
        try:
            await self.kernel.run(code, emit)
        finally:
            if env_vars and await self.kernel.alive():
                back = {k: sandbox[k] for k in env_vars if k in sandbox}
                await self.kernel.set_env(back, [k for k in env_vars if k not in sandbox])

    async def execute(self, code, env_vars=None, timeout=None):
        env_vars = {str(k): str(v) for k, v in (env_vars or {}).items()}
        await self.lock.acquire()
        handed_off = False
        q = asyncio.Queue()
        task = None
        try:
            try:
                await self.ensure_started()
            except Exception as e:  # noqa: BLE001
                log.exception("context %s: kernel start failed", self.id)
                yield results.error("KernelStartFailed", str(e), "")
                return
            task = asyncio.ensure_future(self._run(code, env_vars, q.put_nowait))
            deadline = None if not timeout else asyncio.get_running_loop().time() + timeout
            while True:
                if not q.empty():
                    yield q.get_nowait()
                    continue
                if task.done():
                    break
                getter = asyncio.ensure_future(q.get())
                wait = KEEPALIVE_S
                if deadline is not None:
                    wait = max(0.0, min(wait, deadline - asyncio.get_running_loop().time()))
                done, _ = await asyncio.wait({getter, task}, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
                    continue
                getter.cancel()
                if task in done:
                    continue
                if deadline is not None and asyncio.get_running_loop().time() >= deadline:
                    yield results.error("TimeoutError", f"Execution timed out after {timeout} s: interrupted", "")
                    handed_off = True
                    asyncio.ensure_future(self._abandon(task))
                    return
                yield results.KEEPALIVE
            exc = task.exception()
            if exc is not None:
                if type(exc).__name__ == "KernelDied":
                    yield results.error(
                        "KernelDied", "The kernel died while running the code; a new one was started (state is lost)", ""
                    )
                    await self._replace_kernel()
                else:
                    log.error("context %s: run failed: %r", self.id, exc)
                    yield results.error("ExecutionError", str(exc), "")
        except (GeneratorExit, asyncio.CancelledError):
            if task is not None and not task.done():
                log.warning("context %s: client went away during a run: interrupting", self.id)
                handed_off = True
                asyncio.ensure_future(self._abandon(task))
            raise
        finally:
            if not handed_off:
                self.lock.release()

    async def _abandon(self, task):
        """Interrupts `task`'s run and releases the lock once the kernel is idle again."""
        try:
            await self.kernel.interrupt()
            done, _ = await asyncio.wait({task}, timeout=INTERRUPT_GRACE)
            if not done or (task.exception() is not None):
                log.warning("context %s: run did not end after the interrupt: restarting the kernel", self.id)
                task.cancel()
                await self._replace_kernel()
        except Exception:  # noqa: BLE001
            log.exception("context %s: abandoning a run failed", self.id)
        finally:
            self.lock.release()

    async def _replace_kernel(self):
        try:
            await self.kernel.shutdown()
            self.started = False
            await self.ensure_started()
        except Exception:  # noqa: BLE001
            log.exception("context %s: kernel restart failed", self.id)


class Contexts:
    def __init__(self):
        self.by_id = {}
        self.defaults = {}
        self._lang_locks = {}

    def save(self):
        os.makedirs(RUN_DIR, exist_ok=True)
        data = {
            "contexts": [c.describe() for c in self.by_id.values()],
            "defaults": self.defaults,
        }
        tmp = STATE + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, STATE)

    def load(self):
        """The contexts a previous server left (kernels not started)."""
        try:
            with open(STATE) as f:
                data = json.load(f)
        except (FileNotFoundError, ValueError):
            return
        for c in data.get("contexts", []):
            try:
                self.by_id[c["id"]] = Context(c["id"], c["language"], c["cwd"])
            except (UnknownLanguage, KeyError):
                continue
        self.defaults = {k: v for k, v in data.get("defaults", {}).items() if v in self.by_id}

    async def create(self, language, cwd, cid=None):
        ctx = Context(cid or str(uuid.uuid4()), language, cwd or default_cwd())
        await ctx.ensure_started()
        self.by_id[ctx.id] = ctx
        self.save()
        return ctx

    async def default(self, language):
        """The default context of `language`, created on first use."""
        lock = self._lang_locks.setdefault(language, asyncio.Lock())
        async with lock:
            cid = self.defaults.get(language)
            if cid in self.by_id:
                return self.by_id[cid]
            ctx = await self.create(language, None)
            self.defaults[language] = ctx.id
            self.save()
            return ctx

    async def remove(self, cid):
        ctx = self.by_id.pop(cid)
        self.defaults = {k: v for k, v in self.defaults.items() if v != cid}
        self.save()
        await ctx.close()


def kill_stale_kernels():
    """Ends kernels a previous server process left running (recorded under RUN_DIR/pids;
    a pid is only killed if its process has the recorded start time, so a reused pid, e.g.
    after a snapshot restore, is left alone)."""
    d = os.path.join(RUN_DIR, "pids")
    if not os.path.isdir(d):
        return
    for name in os.listdir(d):
        path = os.path.join(d, name)
        pid = recorded_pid_alive(path)
        if pid and pid != os.getpid() and pid > 1:
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                    log.info("ended kernel %d left by a previous server", pid)
                    break
                except (ProcessLookupError, PermissionError):
                    continue
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
