"""Maps kernel outputs to the NDJSON lines of E2B's code-interpreter protocol.

Each function returns one dict (one line of the /execute stream). Result data keys are MIME
types as Jupyter's (`text/plain`, `image/png` ...) plus `e2b/data` (a DataFrame as
`{column: [values]}`) and `e2b/chart` (a chart read from a matplotlib figure); they become
E2B's fields (text, html, markdown, svg, png, jpeg, pdf, latex, json, javascript, data,
chart); any other MIME type goes to `extra`.
"""

import datetime

FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "e2b/data": "data",
    "e2b/chart": "chart",
}


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def result(data, is_main):
    """A `result` line; `text` loses one pair of surrounding quotes, as E2B's server does."""
    out = {"type": "result"}
    extra = {}
    for mime, value in (data or {}).items():
        field = FIELDS.get(mime)
        if field is None:
            extra[mime] = value
        elif value is not None:
            out[field] = value
    text = out.get("text")
    if isinstance(text, str) and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        out["text"] = text[1:-1]
    out["extra"] = extra
    out["is_main_result"] = bool(is_main)
    return out


def stream(name, text, timestamp=None):
    return {"type": name, "text": text, "timestamp": timestamp or now()}


def error(name, value, traceback):
    if isinstance(traceback, list):
        traceback = "\n".join(traceback)
    return {"type": "error", "name": name or "", "value": value or "", "traceback": traceback or ""}


def execution_count(n):
    return {"type": "number_of_executions", "execution_count": n}


KEEPALIVE = {"type": "keepalive"}
END = {"type": "end_of_execution"}
