"""sandboxd: the Python SDK of sandboxd, a self-hosted sandbox service.

Sync::

    from sandboxd import Sandbox

    with Sandbox.create(image="local/busybox:latest") as sb:
        print(sb.exec("echo hello").stdout)

Async::

    from sandboxd import AsyncSandbox

    async with await AsyncSandbox.create(image="local/busybox:latest") as sb:
        print((await sb.exec("echo hello")).stdout)

The API key and address come from ``SANDBOX_API_KEY`` and ``SANDBOX_API_URL`` unless given.
"""

from ._version import __version__
from .client import AsyncSandboxd, Sandboxd
from .code import CodeContext, Execution, ExecutionError, Logs, Result
from .images import Build, BuildError, BuildLogEvent, ImageProgress, TemplateInfo
from .processes import AsyncProcessHandle, ProcessHandle
from .errors import (
    AuthenticationError,
    BadRequestError,
    CapacityError,
    ConcurrencyLimitError,
    ConflictError,
    ConnectionError,
    InsufficientStorageError,
    InsufficientTokensError,
    NoCodeInterpreterError,
    NoSpaceError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionError,
    QuotaExceededError,
    RangeNotSatisfiableError,
    RateLimitError,
    RequestTimeoutError,
    SandboxdError,
    ServerError,
    ServiceUnavailableError,
    TemplateNotFoundError,
    UnsupportedError,
    UpstreamError,
    ValidationError,
)
from .files import AsyncFiles, AsyncFileWatcher, FileList, Files, FileWatcher
from .sandbox import AsyncSandbox, Sandbox
from .secrets import (
    AsyncSecretsApi,
    SecretInfo,
    SecretInjection,
    SecretInjectionPage,
    SecretPutResult,
    SecretsApi,
)
from .terminal import AsyncTerminal, AsyncTerminals, Terminal, TerminalExit, TerminalInfo, Terminals
from .types import (
    AccountInfo,
    ApiKeyCreated,
    ApiKeyInfo,
    ExecEvent,
    ExecResult,
    FileEntry,
    FileEvent,
    ImageInfo,
    ProcessExit,
    ProcessInfo,
    SandboxInfo,
    SandboxNetwork,
    SandboxPage,
    SnapshotInfo,
    VolumeInfo,
)

__all__ = [
    "__version__",
    "Sandboxd",
    "AsyncSandboxd",
    "Sandbox",
    "AsyncSandbox",
    "Build",
    "BuildError",
    "BuildLogEvent",
    "ImageProgress",
    "TemplateInfo",
    "AsyncProcessHandle",
    "ProcessHandle",
    "Files",
    "AsyncFiles",
    "FileList",
    "FileWatcher",
    "AsyncFileWatcher",
    "Terminals",
    "AsyncTerminals",
    "Terminal",
    "AsyncTerminal",
    "TerminalExit",
    "TerminalInfo",
    "CodeContext",
    "Execution",
    "ExecutionError",
    "Logs",
    "Result",
    "AccountInfo",
    "ApiKeyCreated",
    "ApiKeyInfo",
    "ExecEvent",
    "ExecResult",
    "FileEntry",
    "FileEvent",
    "ImageInfo",
    "ProcessExit",
    "ProcessInfo",
    "SandboxInfo",
    "SandboxNetwork",
    "SandboxPage",
    "SnapshotInfo",
    "VolumeInfo",
    "SecretsApi",
    "AsyncSecretsApi",
    "SecretInfo",
    "SecretInjection",
    "SecretInjectionPage",
    "SecretPutResult",
    "SandboxdError",
    "ValidationError",
    "AuthenticationError",
    "InsufficientTokensError",
    "ConcurrencyLimitError",
    "QuotaExceededError",
    "PermissionError",
    "NotFoundError",
    "TemplateNotFoundError",
    "ConflictError",
    "NoCodeInterpreterError",
    "PayloadTooLargeError",
    "RangeNotSatisfiableError",
    "RateLimitError",
    "BadRequestError",
    "ServerError",
    "UnsupportedError",
    "ServiceUnavailableError",
    "CapacityError",
    "InsufficientStorageError",
    "NoSpaceError",
    "UpstreamError",
    "ConnectionError",
    "RequestTimeoutError",
]
