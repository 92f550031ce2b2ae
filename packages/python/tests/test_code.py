"""run_code on a ``local/code-interpreter`` sandbox, sync and async: state between runs,
callbacks, rich results (a matplotlib png, a DataFrame), errors and timeouts, per-run envs,
languages, contexts (create, list, restart, remove), and the errors of a wrong sandbox."""

from __future__ import annotations

import base64
from typing import Iterator, List

import pytest

from sandboxd import (
    AsyncSandbox,
    AsyncSandboxd,
    CodeContext,
    NoCodeInterpreterError,
    NotFoundError,
    Result,
    Sandbox,
    Sandboxd,
    ValidationError,
)

from conftest import CODE_IMAGE, KEY, URL


@pytest.fixture(scope="module")
def code_sandbox() -> Iterator[Sandbox]:
    # The create waits for the kernel, which takes a while on a busy host.
    with Sandboxd(api_key=KEY, api_url=URL, timeout=300) as c:
        sb = c.sandboxes.create(CODE_IMAGE, timeout_ms=900_000, env={"FROM_CREATE": "created"})
        try:
            yield sb
        finally:
            sb.delete()


def test_state_output_result_and_callbacks(code_sandbox: Sandbox) -> None:
    events: List[str] = []
    ex = code_sandbox.run_code(
        'import sys\nx = 41\nprint("hi", flush=True)\nprint("warn", file=sys.stderr, flush=True)\nx + 1',
        on_stdout=lambda t: events.append(f"stdout:{t}"),
        on_stderr=lambda t: events.append(f"stderr:{t}"),
        on_result=lambda r: events.append(f"result:{r.text}"),
    )
    assert ex.error is None, ex.error
    assert ex.text == "42"
    assert ex.logs.stdout == ["hi\n"] and ex.logs.stderr == ["warn\n"]
    assert events == ["stdout:hi\n", "stderr:warn\n", "result:42"]
    assert isinstance(ex.execution_count, int) and ex.execution_count >= 1
    again = code_sandbox.run_code("x")
    assert again.text == "41" and again.execution_count == ex.execution_count + 1


def test_rich_results(code_sandbox: Sandbox) -> None:
    plot = code_sandbox.run_code(
        'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title("squares")\nplt.show()'
    )
    assert plot.error is None, plot.error
    figs = [r for r in plot.results if r.png]
    assert figs, [r.formats() for r in plot.results]
    fig = figs[0]
    assert fig.is_main_result is False and "png" in fig.formats()
    assert fig.png is not None and base64.b64decode(fig.png)[:4] == b"\x89PNG"
    if fig.chart:
        assert fig.chart.get("title") == "squares"
    df = code_sandbox.run_code('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": ["x", "y"]})')
    main = next(r for r in df.results if r.is_main_result)
    assert isinstance(main, Result)
    assert main.html is not None and "<table" in main.html
    assert main.data is not None and '"x"' in __import__("json").dumps(main.data)


def test_errors_and_timeout(code_sandbox: Sandbox) -> None:
    seen: List[str] = []
    ex = code_sandbox.run_code("def f():\n    return 1 / 0\nf()", on_error=lambda e: seen.append(e.name))
    assert ex.error is not None and ex.error.name == "ZeroDivisionError"
    assert "division by zero" in ex.error.value and "ZeroDivisionError" in ex.error.traceback
    assert seen == ["ZeroDivisionError"]
    slow = code_sandbox.run_code("import time\ntime.sleep(30)", timeout_ms=1000)
    assert slow.error is not None and slow.error.name == "TimeoutError"
    assert code_sandbox.run_code("2 * 3", timeout_ms=60_000).text == "6"


def test_envs_languages_and_contexts(code_sandbox: Sandbox) -> None:
    code = 'import os\nprint(os.environ.get("FROM_CREATE"), os.environ.get("PER_RUN"))'
    assert "".join(code_sandbox.run_code(code, envs={"PER_RUN": "yes"}).logs.stdout) == "created yes\n"
    assert "".join(code_sandbox.run_code(code).logs.stdout) == "created None\n"
    assert code_sandbox.run_code("const a = 6 * 7; a", language="javascript").text == "42"
    assert "".join(code_sandbox.run_code('echo "$((6 * 7))"', language="bash").logs.stdout) == "42\n"
    with pytest.raises(ValidationError):
        code_sandbox.run_code("1", language="cobol")

    ctx = code_sandbox.create_code_context(language="python", cwd="/tmp")
    assert isinstance(ctx, CodeContext) and (ctx.language, ctx.cwd) == ("python", "/tmp")
    assert code_sandbox.run_code("import os\nos.getcwd()", context=ctx).text == "/tmp"
    code_sandbox.run_code("y = 5", context=ctx)
    assert code_sandbox.run_code("y", context=ctx.id).text == "5"
    assert ctx.id in [c.id for c in code_sandbox.list_code_contexts()]
    code_sandbox.restart_code_context(ctx)
    restarted = code_sandbox.run_code("y", context=ctx)
    assert restarted.error is not None and restarted.error.name == "NameError"
    code_sandbox.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in code_sandbox.list_code_contexts()]
    with pytest.raises(NotFoundError):
        code_sandbox.run_code("1", context=ctx)
    with pytest.raises(NotFoundError):
        code_sandbox.restart_code_context(ctx)
    with pytest.raises(ValueError):
        code_sandbox.run_code("1", context=ctx, language="python")


def test_a_sandbox_of_another_image_has_no_code_interpreter(shared_sandbox: Sandbox) -> None:
    with pytest.raises(NoCodeInterpreterError) as e:
        shared_sandbox.run_code("1")
    assert e.value.status == 409 and e.value.kind == "no_code_interpreter"
    assert isinstance(e.value.details, dict) and "code-interpreter" in str(e.value.details.get("image"))


async def test_async_run_code_and_contexts(code_sandbox: Sandbox, aclient: AsyncSandboxd) -> None:
    sb = await AsyncSandbox.get(code_sandbox.id, client=aclient)
    out: List[str] = []
    ex = await sb.run_code('print("async", flush=True)\n1 + 2', on_stdout=out.append)
    assert ex.text == "3" and out == ["async\n"]
    ctx = await sb.create_code_context(language="bash")
    assert ctx.id in [c.id for c in await sb.list_code_contexts()]
    r = await sb.run_code("X=7; echo $X", context=ctx)
    assert "".join(r.logs.stdout) == "7\n"
    await sb.restart_code_context(ctx)
    await sb.remove_code_context(ctx)
    with pytest.raises(NotFoundError):
        await sb.remove_code_context(ctx)
    err = await sb.run_code("raise ValueError('nope')")
    assert err.error is not None and err.error.name == "ValueError"
