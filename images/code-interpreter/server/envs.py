"""The sandbox's own env vars: /run/sandboxd/envs.json (a JSON object name -> value),
written by sandboxd's runtime on every create and warm-pool claim. Re-read when its mtime,
size or inode changes; a missing or unreadable file means no envs.
"""

import json
import logging
import os

log = logging.getLogger("sandboxd-ci.envs")

PATH = os.environ.get("SANDBOXD_CI_ENVS_FILE", "/run/sandboxd/envs.json")
_cache = {"key": None, "envs": {}}


def current():
    """The sandbox's envs now (a fresh dict)."""
    try:
        st = os.stat(PATH)
    except OSError:
        _cache.update(key=None, envs={})
        return {}
    key = (st.st_mtime_ns, st.st_size, st.st_ino)
    if key != _cache["key"]:
        try:
            with open(PATH, encoding="utf-8") as f:
                data = json.load(f)
            envs = {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
        except (OSError, ValueError) as e:
            log.warning("cannot read %s: %s", PATH, e)
            envs = {}
        _cache.update(key=key, envs=envs)
    return dict(_cache["envs"])
