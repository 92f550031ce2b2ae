"""sandboxd's in-sandbox code server: E2B's code-interpreter protocol on port 49999.

Routes (bodies and answers as E2B's server, see docs/code-interpreter.md):
  GET  /health                      200 "OK" once the default Python kernel is ready, else 503
  POST /execute                     {code, context_id?, language?, env_vars?, timeout?} -> NDJSON
  POST /contexts                    {language?, cwd?} -> {id, language, cwd}
  GET  /contexts                    -> [{id, language, cwd}]
  DELETE /contexts/{id}             -> null
  POST /contexts/{id}/restart       -> null
Errors are plain text as E2B's: 400 (context_id and language both given), 404 (unknown
context), 422 (bad body), 500 (a kernel that cannot start, e.g. an unknown language).
"""

import asyncio
import json
import logging
import logging.handlers
import os
import signal
import sys

sys.dont_write_bytecode = True  # the image's files stay as built (and a checkout clean)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import httpd  # noqa: E402
import results  # noqa: E402
from contexts import Contexts, UnknownLanguage, kill_stale_kernels, normalize_language  # noqa: E402
from users import RUN_DIR, default_cwd  # noqa: E402

PORT = int(os.environ.get("SANDBOXD_CI_PORT", "49999"))
HOST = os.environ.get("SANDBOXD_CI_HOST", "0.0.0.0")
LOG_FILE = os.environ.get("SANDBOXD_CI_LOG", "/var/log/sandboxd-ci.log")
# The language whose default context starts with the server (/health waits for it); empty:
# none (the server's own tests on a host without Jupyter).
WARM = os.environ.get("SANDBOXD_CI_WARM", "python")

log = logging.getLogger("sandboxd-ci")


class Server:
    def __init__(self):
        self.contexts = Contexts()
        self.ready = False
        self.startup_error = None

    async def startup(self):
        """Restores the contexts a previous server had and starts the default Python kernel."""
        kill_stale_kernels()
        self.contexts.load()
        if not WARM:
            self.ready = True
            return
        try:
            ctx = await self.contexts.default(WARM)
            await ctx.ensure_started()
            self.ready = True
            log.info("default %s context %s ready", WARM, ctx.id)
        except Exception as e:  # noqa: BLE001
            self.startup_error = str(e)
            log.exception("default python context failed to start")

    async def handle(self, req):
        parts = [p for p in req.path.split("/") if p]
        m = req.method
        if parts == ["health"] and m in ("GET", "HEAD"):
            if self.ready:
                return httpd.json_response(200, "OK")
            return httpd.text_response(503, self.startup_error or "starting")
        if parts == ["execute"] and m == "POST":
            return await self.execute(req)
        if parts == ["contexts"] and m == "POST":
            return await self.create_context(req)
        if parts == ["contexts"] and m == "GET":
            return httpd.json_response(200, [c.describe() for c in self.contexts.by_id.values()])
        if len(parts) == 2 and parts[0] == "contexts" and m == "DELETE":
            if parts[1] not in self.contexts.by_id:
                return httpd.text_response(404, f"Context {parts[1]} not found")
            await self.contexts.remove(parts[1])
            return httpd.json_response(200, None)
        if len(parts) == 3 and parts[0] == "contexts" and parts[2] == "restart" and m == "POST":
            ctx = self.contexts.by_id.get(parts[1])
            if ctx is None:
                return httpd.text_response(404, f"Context {parts[1]} not found")
            try:
                await ctx.restart()
            except Exception as e:  # noqa: BLE001
                log.exception("restart of %s failed", ctx.id)
                return httpd.text_response(500, f"Failed to restart context {ctx.id}: {e}")
            return httpd.json_response(200, None)
        known = {("health",), ("execute",), ("contexts",)}
        if tuple(parts[:1]) in known:
            return httpd.text_response(405, "Method Not Allowed")
        return httpd.json_response(404, {"detail": "Not Found"})

    @staticmethod
    def body(req):
        try:
            data = req.json()
        except (ValueError, UnicodeDecodeError):
            return None, httpd.json_response(422, {"detail": "body is not valid JSON"})
        if data is None:
            data = {}
        if not isinstance(data, dict):
            return None, httpd.json_response(422, {"detail": "body must be a JSON object"})
        return data, None

    async def execute(self, req):
        data, bad = self.body(req)
        if bad:
            return bad
        code = data.get("code")
        if not isinstance(code, str):
            return httpd.json_response(
                422, {"detail": [{"loc": ["body", "code"], "msg": "field required (a string)", "type": "value_error"}]}
            )
        env_vars = data.get("env_vars") or {}
        if not isinstance(env_vars, dict):
            return httpd.json_response(422, {"detail": [{"loc": ["body", "env_vars"], "msg": "must be an object"}]})
        timeout = data.get("timeout")
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout <= 0):
            return httpd.json_response(422, {"detail": [{"loc": ["body", "timeout"], "msg": "seconds, > 0"}]})
        cid, language = data.get("context_id"), data.get("language")
        if cid and language:
            return httpd.text_response(400, "Only one of context_id or language can be provided")
        if cid:
            ctx = self.contexts.by_id.get(cid)
            if ctx is None:
                return httpd.text_response(404, f"Context {cid} not found")
        else:
            try:
                ctx = await self.contexts.default(normalize_language(language))
            except UnknownLanguage as e:
                return httpd.text_response(500, f"Failed to create context: no kernel for language {e}")
            except Exception as e:  # noqa: BLE001
                return httpd.text_response(500, str(e))
        return httpd.Stream(self._lines(ctx.execute(code, env_vars, timeout)))

    @staticmethod
    async def _lines(gen):
        try:
            async for item in gen:
                yield (json.dumps(item) + "\n").encode("utf-8")
            yield (json.dumps(results.END) + "\n").encode("utf-8")
        finally:
            await gen.aclose()

    async def create_context(self, req):
        data, bad = self.body(req)
        if bad:
            return bad
        language = normalize_language(data.get("language"))
        cwd = data.get("cwd") or default_cwd()
        try:
            ctx = await self.contexts.create(language, cwd)
        except UnknownLanguage as e:
            return httpd.text_response(500, f"Failed to create context: no kernel for language {e}")
        except Exception as e:  # noqa: BLE001
            log.exception("context creation failed")
            return httpd.text_response(500, f"Failed to create context: {e}")
        return httpd.json_response(200, ctx.describe())


def setup_logging():
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    try:
        h = logging.handlers.RotatingFileHandler(LOG_FILE, maxBytes=1024 * 1024, backupCount=1)
    except OSError:
        h = logging.StreamHandler(sys.stderr)
    h.setFormatter(fmt)
    root.addHandler(h)
    for noisy in ("traitlets", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


async def amain():
    setup_logging()
    os.makedirs(RUN_DIR, exist_ok=True)
    with open(os.path.join(RUN_DIR, "server.pid"), "w") as f:
        f.write(str(os.getpid()))
    server = Server()
    srv = await httpd.serve(server.handle, HOST, PORT)
    log.info("listening on %s:%d", HOST, PORT)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    asyncio.ensure_future(server.startup())
    await stop.wait()
    srv.close()
    for ctx in list(server.contexts.by_id.values()):
        await ctx.close()


if __name__ == "__main__":
    asyncio.run(amain())
