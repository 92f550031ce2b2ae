/**
 * Wire types of the SDK, derived from the protocol's TypeBox schemas (never restated), and,
 * at the end, those of files and processes, which the protocol has no schemas for yet.
 * Type-only: nothing here exists at run time.
 */
import type { Static } from 'typebox';
import type * as P from '@sandboxd/protocol';

/** A sandbox as the server describes it. */
export type SandboxInfo = Static<typeof P.SandboxSchema>;
/** The body of sandbox creation: `image` plus optional `env`, `volumes`, `timeoutMs`, `ports`, `metadata`, `onTimeout`, `network`, `isolation`. */
export type SandboxCreateParams = Static<typeof P.SandboxCreateSchema>;
/**
 * What a sandbox may reach outside: `'none'`, `'internet'`, or `{allow: [rule, ...]}` with
 * domains (`pypi.org`), wildcards (`*.npmjs.org`) and IPv4 CIDRs.
 */
export type Egress = P.Egress;
/**
 * A sandbox's network settings: `{egress, secrets?}`; `secrets` are the injection rules
 * (docs/secrets.md).
 */
export type SandboxNetwork = P.SandboxNetwork;
/**
 * One secret injection rule: requests through the egress proxy to one of `domains` get
 * secret `secret`'s value: with `header`, in that header as `format` (`{value}` stands for
 * it; default `{value}`), and only there; without, wherever the placeholder appears in the
 * request head. `placeholder` is set by
 * the server (what the sandbox holds, in the env var named after the secret).
 */
export type SecretRule = P.SecretRule;
/** A secret as the server shows it: name, description, version, dates; never its value. */
export type SecretInfo = P.Secret;
/** One request the egress proxy put a secret into (or tried to): the audit trail. */
export type SecretInjectionInfo = P.SecretInjection;
/** One page of the audit trail, newest first; `next` is the `before` of the next page. */
export type SecretInjectionPage = Static<typeof P.SecretInjectionListSchema>;
/** A sandbox's lifecycle state: `started`, `paused`, `stopped` or `error`. */
export type SandboxState = P.SandboxState;
/** What a sandbox does at `stopAt`: `stop` (default) or `pause`. */
export type OnTimeout = P.OnTimeout;
/** An isolation tier: `container` (namespaces, seccomp, cgroups) or `gvisor` (a user-space kernel). */
export type Isolation = P.Isolation;
/** Where a pause keeps a sandbox's memory: `ram` (frozen in place) or `disk` (gVisor: checkpointed). */
export type PauseMemory = P.PauseMemory;
/** Options of `pause`: `memory: 'disk'` checkpoints a gVisor sandbox to disk. */
export type PauseParams = Static<typeof P.PauseRequestSchema>;
/** Options of `fork`: `count`, 1 to 10 (default 1). */
export type ForkParams = Static<typeof P.ForkRequestSchema>;
/** The caller's labels of a sandbox: string to string. */
export type SandboxMetadata = Static<typeof P.MetadataMap>;
/**
 * Filters and paging of the sandbox list. `metadata` keeps the sandboxes whose metadata has
 * every pair given (sent as `metadata.<key>=<value>` query parameters).
 */
export type SandboxListQuery = Static<typeof P.SandboxListQuerySchema> & { metadata?: SandboxMetadata };
/** The optional body of resume and start: a new lifetime counted from now. */
export type SandboxRunParams = Static<typeof P.SandboxRunRequestSchema>;
/** A snapshot: an image private to the account (`image` is `snapshots/<name>`, usable in create). */
export type SnapshotInfo = Static<typeof P.SnapshotSchema>;
/** The snapshot list as the server answers it. */
export type SnapshotList = Static<typeof P.SnapshotListSchema>;
/** One page of the sandbox list. */
export type SandboxListPage = Static<typeof P.SandboxListSchema>;
/** Options of an exec: `background`, `cwd`, `env`, `timeoutMs` (foreground, default 60000). */
export type ExecOptions = Static<typeof P.ExecOptionsSchema>;
/** The result of an exec; `pid` only for background, `truncated` only when output was cut. */
export type ExecResult = Static<typeof P.ExecResultSchema>;
/** Options of terminal creation: `shell`, `cwd`, `cols`, `rows`. */
export type TerminalCreateParams = Static<typeof P.TerminalCreateSchema>;
/** A terminal as `GET .../terminals/{id}` describes it. */
export type TerminalInfo = Static<typeof P.TerminalSchema>;
/** One item of a sandbox's terminal list. */
export type TerminalListItem = Static<typeof P.TerminalListItemSchema>;
/** The `ready` control message: the shell's pid and name. */
export type TerminalReady = Static<typeof P.ReadyMessageSchema>;
/** The `exit` control message: the shell's exit code and signal. */
export type TerminalExitMessage = Static<typeof P.ExitMessageSchema>;
/** How a terminal's shell ended. */
export type TerminalExit = Omit<TerminalExitMessage, 'type'>;
/** The account: plan, balance, limits and usage. */
export type AccountInfo = Static<typeof P.AccountSchema>;
/** An API key as listed (never the key itself). */
export type ApiKeyInfo = Static<typeof P.KeySchema>;
/** A new API key; `key` is shown this once. */
export type ApiKeyCreated = Static<typeof P.KeyCreatedSchema>;
/** A named volume of the account. */
export type VolumeInfo = Static<typeof P.VolumeSchema>;
/** An image in the server's cache. */
export type ImageInfo = Static<typeof P.ImageSchema>;
/** One line of streamed pull/build progress. */
export type ImageProgressEvent = Static<typeof P.ImageProgressEventSchema>;
/** A progress report of a pull or build (`bytes`/`totalBytes` when known). */
export type ImageProgress = Extract<ImageProgressEvent, { type: 'progress' }>;
/** The onboarding event kinds `events.track` accepts. */
export type EventKind = P.EventKind;
/** Images the server builds offline. */
export type BuildableImage = P.BuildableImage;
/** Phases of a pull or build. */
export type ImagePhase = P.ImagePhase;
/** A build of a template: state, steps done and cached, the image it makes, its failure. */
export type Build = Static<typeof P.BuildSchema>;
/** `queued`, `building`, then one of the final `ready`, `error`, `cancelled`. */
export type BuildState = P.BuildState;
/** Why a build failed: `details` has the step, Dockerfile line, instruction, exit code and output's end. */
export type BuildFailure = Static<typeof P.BuildFailureSchema>;
/** One line of a build's log stream: a `log` line (with its `seq`) or the final `end`. */
export type BuildLogEvent = Static<typeof P.BuildLogEventSchema>;
/** A `log` line of a build's log stream. */
export type BuildLogLine = Extract<BuildLogEvent, { type: 'log' }>;
/** A template of the account: the image `templates/<name>:<tag>` a ready build made. */
export type TemplateInfo = Static<typeof P.TemplateSchema>;
/** The server's error kinds (`validation`, `not_found`, ...). */
export type ErrorKind = P.ErrorKind;

// Files and live processes (docs/files-and-processes.md). The protocol has no schemas for
// them yet, so they are written out here, as the contract states them. Type aliases, not
// interfaces: the build expands the aliases of this file into the package's types.d.ts.

/** A file, directory, symlink or other entry of a sandbox. A symlink is described itself (not followed). */
export type FileEntry = {
  name: string;
  /** Absolute path in the sandbox. */
  path: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  /** Permission bits as a number (`0o644` = 420). */
  mode: number;
  /** User name from the sandbox's `/etc/passwd`, else the numeric uid as a string. */
  owner: string;
  /** Group name from the sandbox's `/etc/group`, else the numeric gid as a string. */
  group: string;
  /** ISO 8601. */
  modifiedAt: string;
  /** Where a symlink points (symlinks only). */
  symlinkTarget?: string;
};
/** The kinds of change a file watch reports; a rename is `rename` of the old path, then `create` of the new. */
export type FileEventType = 'create' | 'write' | 'rename' | 'remove' | 'chmod';
/** One change under a watched directory; `entry` describes the path after the change (not for `rename`, `remove`). */
export type FileEvent = { type: FileEventType; path: string; entry?: FileEntry };
/** A process started through the API (background or streamed exec), as `GET .../processes` lists it. */
export type ProcessInfo = {
  pid: number;
  command: string;
  tag?: string | null;
  cwd: string;
  startedAt: string;
  running: boolean;
  /** Set once exited: the code, or 128 + n for signal n. */
  exitCode?: number | null;
};
/** The signals `POST .../processes/{pid}/signal` accepts; sent to the process's group. */
export type ProcessSignal =
  | 'SIGTERM'
  | 'SIGKILL'
  | 'SIGINT'
  | 'SIGHUP'
  | 'SIGQUIT'
  | 'SIGUSR1'
  | 'SIGUSR2'
  | 'SIGSTOP'
  | 'SIGCONT';
/** How a process ended: `exitCode` is 128 + n when killed by signal n (then `signal` names it), 124 on timeout. */
export type ProcessExit = { exitCode: number; signal: string | null };
/** Which output stream a chunk came from. */
export type OutputStream = 'stdout' | 'stderr';
