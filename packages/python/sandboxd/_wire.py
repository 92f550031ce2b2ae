"""Pure functions between the API's JSON and the SDK's dataclasses and request bodies.

The sync and async clients both use these, so the two surfaces cannot drift: only I/O
differs between them.
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any, Dict, List, Mapping, Optional, Sequence, cast

from .types import (
    AccountInfo,
    ApiKeyCreated,
    ApiKeyInfo,
    AccountUsage,
    Egress,
    ExecEvent,
    ExecResult,
    FileEntry,
    FileEvent,
    ImageInfo,
    PlanLimits,
    ProcessExit,
    ProcessInfo,
    SandboxInfo,
    SandboxNetwork,
    SecretRule,
    SnapshotInfo,
    VolumeInfo,
    VolumeSpec,
)


def quote(segment: str) -> str:
    """A path segment, percent-encoded like JavaScript's ``encodeURIComponent``."""
    from urllib.parse import quote as q

    return q(str(segment), safe="-_.!~*'()")


def parse_time(s: Any) -> datetime:
    """An ISO 8601 date-time (``...Z`` too) as an aware datetime."""
    if not isinstance(s, str):
        raise TypeError(f"expected an ISO 8601 date-time, got {s!r}")
    text = s[:-1] + "+00:00" if s.endswith("Z") else s
    return datetime.fromisoformat(text)


def _opt_time(s: Any) -> Optional[datetime]:
    return None if s is None else parse_time(s)


def network_of(d: Mapping[str, Any]) -> SandboxNetwork:
    secrets = d.get("secrets")
    return SandboxNetwork(
        egress=d.get("egress", "none"),
        secrets=[dict(r) for r in secrets] if isinstance(secrets, list) else None,
    )


def _network(d: Any) -> Optional[SandboxNetwork]:
    if not isinstance(d, dict):
        return None
    return network_of(d)


def sandbox_info(d: Mapping[str, Any]) -> SandboxInfo:
    return SandboxInfo(
        id=d["id"],
        name=d.get("name", ""),
        state=d["state"],
        region=d.get("region", ""),
        image=d.get("image", ""),
        created_at=parse_time(d["createdAt"]),
        stop_at=parse_time(d["stopAt"]),
        public_access_url_template=d.get("publicAccessUrlTemplate", ""),
        metadata=dict(d.get("metadata") or {}),
        on_timeout=d.get("onTimeout", "stop"),
        expires_at=_opt_time(d.get("expiresAt")),
        network=_network(d.get("network")),
        isolation=d.get("isolation", "container"),
        paused_memory=d.get("pausedMemory"),
    )


def exec_result(d: Mapping[str, Any]) -> ExecResult:
    code = int(d.get("exitCode", 0))
    return ExecResult(
        stdout=d.get("stdout", ""),
        stderr=d.get("stderr", ""),
        exit_code=code,
        success=bool(d.get("success", code == 0)),
        truncated=bool(d.get("truncated", False)),
        pid=d.get("pid"),
    )


def exec_event(d: Mapping[str, Any]) -> Optional[ExecEvent]:
    """One NDJSON line of a streamed exec or process output; None for a type this SDK does not know."""
    t = d.get("type")
    if t == "start":
        rf = d.get("replayFrom")
        return ExecEvent(
            type="start",
            pid=d.get("pid"),
            replay_from={str(k): int(v) for k, v in rf.items()} if isinstance(rf, dict) else None,
        )
    if t in ("stdout", "stderr"):
        if isinstance(d.get("dataBase64"), str):
            raw = base64.b64decode(d["dataBase64"])
        else:
            raw = str(d.get("data", "")).encode("utf-8")
        return ExecEvent(type=t, raw=raw, data=raw.decode("utf-8", "replace"))
    if t == "exit":
        return ExecEvent(type="exit", exit_code=int(d.get("exitCode", 0)), signal=d.get("signal"))
    return None


def process_info(d: Mapping[str, Any]) -> ProcessInfo:
    return ProcessInfo(
        pid=int(d["pid"]),
        command=d.get("command", ""),
        cwd=d.get("cwd", ""),
        started_at=parse_time(d["startedAt"]),
        running=bool(d.get("running")),
        tag=d.get("tag"),
        exit_code=d.get("exitCode"),
    )


def process_exit(exit_code: int, signal: Optional[str]) -> ProcessExit:
    return ProcessExit(exit_code=exit_code, signal=signal)


def snapshot_info(d: Mapping[str, Any]) -> SnapshotInfo:
    return SnapshotInfo(
        name=d["name"],
        image=d["image"],
        size_bytes=int(d.get("sizeBytes", 0)),
        base_image=d.get("baseImage", ""),
        sandbox_id=d.get("sandboxId", ""),
        created_at=parse_time(d["createdAt"]),
    )


def volume_info(d: Mapping[str, Any]) -> VolumeInfo:
    return VolumeInfo(
        name=d["name"],
        size_gb=int(d.get("sizeGb", 0)),
        created_at=parse_time(d["createdAt"]),
        mounted_by=list(d.get("mountedBy") or []),
    )


def image_info(d: Mapping[str, Any]) -> ImageInfo:
    return ImageInfo(
        ref=d["ref"],
        digest=d.get("digest", ""),
        size_bytes=int(d.get("sizeBytes", 0)),
        working_dir=d.get("workingDir", ""),
        user=d.get("user", ""),
        env=dict(d.get("env") or {}),
    )


def account_info(d: Mapping[str, Any]) -> AccountInfo:
    lim = d.get("limits") or {}
    use = d.get("usage") or {}
    return AccountInfo(
        id=d["id"],
        email=d.get("email", ""),
        plan=d.get("plan", ""),
        admin=bool(d.get("admin")),
        created_at=parse_time(d["createdAt"]),
        balance=int(d.get("balance", 0)),
        limits=PlanLimits(
            max_lifetime_ms=int(lim.get("maxLifetimeMs", 0)),
            concurrency=int(lim.get("concurrency", 0)),
            memory_bytes=int(lim.get("memoryBytes", 0)),
            cpus=float(lim.get("cpus", 0)),
            pids=int(lim.get("pids", 0)),
            root_disk_bytes=int(lim.get("rootDiskBytes", 0)),
            max_paused=int(lim.get("maxPaused", 0)),
            paused_retention_ms=int(lim.get("pausedRetentionMs", 0)),
            snapshot_bytes=int(lim.get("snapshotBytes", 0)),
        ),
        usage=AccountUsage(
            started_sandboxes=int(use.get("startedSandboxes", 0)),
            paused_sandboxes=int(use.get("pausedSandboxes", 0)),
            volumes=int(use.get("volumes", 0)),
            snapshot_bytes=int(use.get("snapshotBytes", 0)),
        ),
    )


def api_key_info(d: Mapping[str, Any]) -> ApiKeyInfo:
    return ApiKeyInfo(
        id=d["id"],
        name=d.get("name", ""),
        prefix=d.get("prefix", ""),
        created_at=parse_time(d["createdAt"]),
        last_used_at=_opt_time(d.get("lastUsedAt")),
    )


def api_key_created(d: Mapping[str, Any]) -> ApiKeyCreated:
    return ApiKeyCreated(
        id=d["id"], name=d.get("name", ""), prefix=d.get("prefix", ""), created_at=parse_time(d["createdAt"]), key=d["key"]
    )


def file_entry(d: Mapping[str, Any]) -> FileEntry:
    return FileEntry(
        name=d["name"],
        path=d["path"],
        type=d["type"],
        size=int(d.get("size", 0)),
        mode=int(d.get("mode", 0)),
        owner=str(d.get("owner", "")),
        group=str(d.get("group", "")),
        modified_at=parse_time(d["modifiedAt"]),
        symlink_target=d.get("symlinkTarget"),
    )


def file_event(d: Mapping[str, Any]) -> FileEvent:
    e = d.get("entry")
    return FileEvent(type=d["type"], path=d["path"], entry=file_entry(e) if isinstance(e, dict) else None)


def _egress(e: Egress) -> Any:
    if isinstance(e, str):
        return e
    return {k: list(v) for k, v in e.items()}


def _volumes(v: Mapping[str, VolumeSpec]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for path, spec in v.items():
        if isinstance(spec, str):
            out[path] = spec
        else:
            s = dict(spec)
            if "size_gb" in s:
                s["sizeGb"] = s.pop("size_gb")
            out[path] = s
    return out


def create_body(
    image: str,
    *,
    timeout_ms: Optional[int] = None,
    env: Optional[Mapping[str, str]] = None,
    volumes: Optional[Mapping[str, VolumeSpec]] = None,
    metadata: Optional[Mapping[str, str]] = None,
    on_timeout: Optional[str] = None,
    egress: Optional[Egress] = None,
    secrets: Optional[Sequence[SecretRule]] = None,
    public_ports: Optional[bool] = None,
    isolation: Optional[str] = None,
    extra: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """The body of ``POST /api/v1/sandboxes``; None options are left out (the server's defaults)."""
    body: Dict[str, Any] = {"image": image}
    if timeout_ms is not None:
        body["timeoutMs"] = timeout_ms
    if env is not None:
        body["env"] = dict(env)
    if volumes is not None:
        body["volumes"] = _volumes(volumes)
    if metadata is not None:
        body["metadata"] = dict(metadata)
    if on_timeout is not None:
        body["onTimeout"] = on_timeout
    if egress is not None:
        body["network"] = egress_body(egress, secrets)
    elif secrets is not None:
        raise ValueError("secrets need the egress their domains go through: pass egress too")
    if public_ports is not None:
        body["ports"] = {"public": public_ports}
    if isolation is not None:
        body["isolation"] = isolation
    if extra:
        body.update(extra)
    return body


def pause_body(memory: Optional[str]) -> Optional[Dict[str, Any]]:
    """The body of ``POST .../pause``: none without ``memory`` (as before tiers)."""
    return None if memory is None else {"memory": memory}


def fork_body(count: Optional[int]) -> Dict[str, Any]:
    """The body of ``POST .../fork``: ``{"count": n}``, or ``{}`` for the server's default (1)."""
    return {} if count is None else {"count": count}


def egress_body(egress: Egress, secrets: Optional[Sequence[SecretRule]] = None) -> Dict[str, Any]:
    body: Dict[str, Any] = {"egress": _egress(egress)}
    if secrets is not None:
        body["secrets"] = [dict(r) for r in secrets]
    return body


def list_params(
    *,
    state: Optional[str] = None,
    metadata: Optional[Mapping[str, str]] = None,
    limit: Optional[int] = None,
    cursor: Optional[str] = None,
) -> Dict[str, Any]:
    """Query of a sandbox list: ``state``, ``limit``, ``cursor``, one ``metadata.<key>`` per pair."""
    out: Dict[str, Any] = {"state": state, "limit": limit, "cursor": cursor}
    for k, v in (metadata or {}).items():
        if k == "":
            raise ValueError("metadata filter keys must not be empty")
        out[f"metadata.{k}"] = v
    return out


def exec_options(
    *,
    cwd: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    user: Optional[str] = None,
    timeout_ms: Optional[int] = None,
    tag: Optional[str] = None,
    background: Optional[bool] = None,
    stream: Optional[bool] = None,
    stdin: Optional[bool] = None,
) -> Dict[str, Any]:
    """The ``options`` of an exec request; None options are left out."""
    o: Dict[str, Any] = {}
    if background:
        o["background"] = True
    if stream:
        o["stream"] = True
    if stdin:
        o["stdin"] = True
    if cwd is not None:
        o["cwd"] = cwd
    if env is not None:
        o["env"] = dict(env)
    if user is not None:
        o["user"] = user
    if timeout_ms is not None:
        o["timeoutMs"] = timeout_ms
    if tag is not None:
        o["tag"] = tag
    return o


def run_body(timeout_ms: Optional[int]) -> Dict[str, Any]:
    """The body of resume and start: ``{}`` or ``{timeoutMs}``."""
    return {} if timeout_ms is None else {"timeoutMs": timeout_ms}


def public_url(api_url: str, template: str, port: int) -> str:
    """The public address of ``port``, with the scheme of the API URL."""
    if isinstance(port, bool) or not isinstance(port, int) or port < 1 or port > 65535:
        raise ValueError(f"port must be an integer from 1 to 65535 (got {port!r})")
    scheme = api_url.split("://", 1)[0]
    return f"{scheme}://{template.replace('{{PORT}}', str(port))}"


def items(d: Any, key: str) -> List[Mapping[str, Any]]:
    """The list ``d[key]`` of an answer (empty when absent)."""
    v = d.get(key) if isinstance(d, dict) else None
    return cast(List[Mapping[str, Any]], v) if isinstance(v, list) else []


__all__: Sequence[str] = []
