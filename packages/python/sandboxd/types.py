"""The SDK's data types: dataclasses in snake_case, read from the API's camelCase JSON by the
pure functions of ``sandboxd._wire`` (shared by the sync and async clients).

Times are timezone-aware :class:`datetime.datetime` values; durations keep the API's unit
(``timeout_ms`` is milliseconds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Union

#: A sandbox's lifecycle state.
SandboxState = Literal["started", "paused", "stopped", "error"]
#: What a sandbox does at ``stop_at``: ``stop`` (default) or ``pause``.
OnTimeout = Literal["stop", "pause"]
#: An isolation tier: ``container`` (namespaces, seccomp, cgroups) or ``gvisor`` (a user-space kernel).
Isolation = Literal["container", "gvisor"]
#: Where a pause keeps a sandbox's memory: ``ram`` (frozen in place) or ``disk`` (gVisor: checkpointed).
PauseMemory = Literal["ram", "disk"]
#: What a sandbox may reach outside: ``"none"``, ``"internet"`` or ``{"allow": [rule, ...]}``
#: with domains (``pypi.org``), wildcards (``*.npmjs.org``) and IPv4 CIDRs.
Egress = Union[Literal["none", "internet"], Mapping[str, Sequence[str]]]
#: A secret injection rule, as the API writes it: ``{"secret": "OPENAI", "domains":
#: ["api.openai.com"], "header": "Authorization", "format": "Bearer {value}"}`` (``header`` and
#: ``format`` optional; the server adds ``placeholder``). See docs/secrets.md.
SecretRule = Mapping[str, Any]
#: A volume specification: a name, or ``{"name": ..., "sizeGb": ...}``.
VolumeSpec = Union[str, Mapping[str, Any]]
#: The signals a process may be sent (to its process group).
ProcessSignal = Literal[
    "SIGTERM", "SIGKILL", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGSTOP", "SIGCONT"
]
#: Which output stream a chunk came from.
OutputStream = Literal["stdout", "stderr"]


@dataclass
class SandboxNetwork:
    """A sandbox's network settings."""

    #: ``"none"``, ``"internet"`` or ``{"allow": [...]}`` (rules canonical, as the server keeps them).
    egress: Union[str, Dict[str, List[str]]]
    #: The secret injection rules (each with its ``placeholder``), or None without any.
    secrets: Optional[List[Dict[str, Any]]] = None


@dataclass
class SandboxInfo:
    """A sandbox as the server describes it."""

    id: str
    name: str
    state: SandboxState
    region: str
    image: str
    created_at: datetime
    #: Started: when the sandbox is due to stop (or pause). Paused or stopped: when it did.
    stop_at: datetime
    #: Contains the literal ``{{PORT}}``.
    public_access_url_template: str
    metadata: Dict[str, str]
    on_timeout: OnTimeout
    #: Paused, stopped or error: when the sandbox and what it kept are deleted.
    expires_at: Optional[datetime] = None
    network: Optional[SandboxNetwork] = None
    #: Its isolation tier: ``container`` or ``gvisor``.
    isolation: Isolation = "container"
    #: Paused: where its memory is kept, ``ram`` or ``disk`` (gVisor); None otherwise.
    paused_memory: Optional[PauseMemory] = None


@dataclass
class ExecResult:
    """The result of a command. A failing command is not an error: check ``exit_code``."""

    stdout: str
    stderr: str
    #: The exit code; 128 + n when killed by signal n, 124 on timeout.
    exit_code: int
    #: ``exit_code == 0``.
    success: bool
    #: True when a stream was cut at 1 MiB.
    truncated: bool = False
    #: The process id (background processes).
    pid: Optional[int] = None


@dataclass
class ExecEvent:
    """One event of a streamed exec: ``start`` (``pid``), ``stdout``/``stderr`` (``data``) or
    ``exit`` (``exit_code``, ``signal``)."""

    type: Literal["start", "stdout", "stderr", "exit"]
    pid: Optional[int] = None
    #: The chunk as text (invalid UTF-8 replaced).
    data: str = ""
    #: The chunk's bytes, exactly as written.
    raw: bytes = b""
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    #: ``start`` of a replay: the bytes of each stream that came before what is replayed.
    replay_from: Optional[Dict[str, int]] = None


@dataclass
class ProcessExit:
    """How a process ended: ``exit_code`` is 128 + n when killed by signal n (then ``signal`` names it), 124 on timeout."""

    exit_code: int
    signal: Optional[str] = None


@dataclass
class ProcessInfo:
    """A process started through the API (background or streamed exec)."""

    pid: int
    command: str
    cwd: str
    started_at: datetime
    running: bool
    tag: Optional[str] = None
    #: Set once exited: the code, or 128 + n for signal n.
    exit_code: Optional[int] = None


@dataclass
class SandboxPage:
    """One page of the sandbox list; pass ``next_cursor`` back as ``cursor`` for the next."""

    sandboxes: List[Any]
    next_cursor: Optional[str] = None


@dataclass
class SnapshotInfo:
    """A snapshot: an image private to the account (``image`` is ``snapshots/<name>``, usable in create)."""

    name: str
    image: str
    size_bytes: int
    base_image: str
    sandbox_id: str
    created_at: datetime


@dataclass
class VolumeInfo:
    """A named volume of the account."""

    name: str
    size_gb: int
    created_at: datetime
    #: Ids of running sandboxes that mount it.
    mounted_by: List[str] = field(default_factory=list)


@dataclass
class ImageInfo:
    """An image in the server's cache."""

    ref: str
    digest: str
    size_bytes: int
    working_dir: str
    user: str
    env: Dict[str, str] = field(default_factory=dict)


@dataclass
class FileEntry:
    """A file, directory, symlink or other entry of a sandbox (a symlink is described itself)."""

    name: str
    #: Absolute path in the sandbox.
    path: str
    type: Literal["file", "dir", "symlink", "other"]
    size: int
    #: Permission bits as a number (``0o644``).
    mode: int
    owner: str
    group: str
    modified_at: datetime
    #: Where a symlink points (symlinks only).
    symlink_target: Optional[str] = None


@dataclass
class FileEvent:
    """One change under a watched directory; ``entry`` describes the path after the change.
    ``overflow`` (``path`` empty) says events were lost."""

    type: Literal["create", "write", "rename", "remove", "chmod", "overflow"]
    path: str
    entry: Optional[FileEntry] = None


@dataclass
class PlanLimits:
    """The limits of an account's plan."""

    max_lifetime_ms: int
    concurrency: int
    memory_bytes: int
    cpus: float
    pids: int
    root_disk_bytes: int
    max_paused: int
    paused_retention_ms: int
    snapshot_bytes: int


@dataclass
class AccountUsage:
    """What an account uses now."""

    started_sandboxes: int
    paused_sandboxes: int
    volumes: int
    snapshot_bytes: int


@dataclass
class AccountInfo:
    """The account of the API key: plan, token balance, limits and usage."""

    id: str
    email: str
    plan: str
    admin: bool
    created_at: datetime
    #: Tokens.
    balance: int
    limits: PlanLimits
    usage: AccountUsage


@dataclass
class ApiKeyInfo:
    """An API key as listed (never the key itself)."""

    id: str
    name: str
    #: The key's first characters, to recognise it.
    prefix: str
    created_at: datetime
    last_used_at: Optional[datetime] = None


@dataclass
class ApiKeyCreated:
    """A new API key; ``key`` is shown this once."""

    id: str
    name: str
    prefix: str
    created_at: datetime
    key: str
