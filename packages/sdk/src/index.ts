/**
 * `@sandboxd/sdk`: the TypeScript client of sandboxd, for Node 20+ and browsers.
 *
 * ```ts
 * import { Sandbox } from '@sandboxd/sdk';
 * const sandbox = await Sandbox.create({ image: 'local/debian:bookworm' });
 * console.log((await sandbox.exec('echo hello')).stdout);
 * await sandbox.delete();
 * ```
 */
export { Sandbox, type Connection, type ExecProcessOptions, type ExecWaitOptions } from './sandbox.js';
export { SNAPSHOT_TIMEOUT_MS, type SnapshotOptions } from './lifecycle.js';
export { Processes, type ExecCallOptions, type ProcessConnectOptions } from './processes.js';
export { ProcessHandle, MAX_RESULT_BYTES, type ProcessOutputHandlers } from './process-handle.js';
export {
  Files,
  type FileCallOptions,
  type FileWriteOptions,
  type FileReadOptions,
  type FileListOptions,
  type FileList,
} from './files.js';
export { FileWatcher, type FileWatchOptions, type FileWatchEnd } from './file-watch.js';
export { REPLAY_WINDOW } from './replay.js';
export type { UploadData } from './upload.js';
export {
  CodeInterpreter,
  Execution,
  Result,
  type CodeContext,
  type CodeLanguage,
  type CreateCodeContextOptions,
  type ExecutionError,
  type ResultData,
  type RunCodeOptions,
} from './code.js';
export { Terminal, Terminals, type TerminalConnectOptions } from './terminal.js';
export {
  SandboxdClient,
  SandboxesApi,
  VolumesApi,
  SnapshotsApi,
  AccountApi,
  KeysApi,
  EventsApi,
} from './client.js';
export { SecretsApi, type SecretInjectionQuery, type SecretUpdate } from './secrets.js';
export { ImagesApi, IMAGE_JOB_TIMEOUT_MS, type ImageJobOptions, type ImageImportOptions } from './images.js';
export {
  BuildsApi,
  TemplatesApi,
  BuildError,
  BUILD_SEND_TIMEOUT_MS,
  MAX_LOG_RECONNECTS,
  type BuildParams,
  type BuildWaitOptions,
  type BuildLogsOptions,
  type ImageBuildOptions,
} from './builds.js';
export type { BuildContext } from './build-context.js';
export { tarChunks, tarBytes, type TarEntry } from './tar.js';
export { ndjsonLines } from './ndjson.js';
export { HttpClient, type RequestOptions } from './http.js';
export {
  DEFAULT_API_URL,
  DEFAULT_MAX_RETRIES,
  DEFAULT_TIMEOUT_MS,
  type ClientOptions,
  type ResolvedConfig,
} from './config.js';
export type { WebSocketConstructor, WebSocketLike } from './websocket.js';
export {
  SandboxdApiError,
  ValidationError,
  AuthenticationError,
  InsufficientTokensError,
  ConcurrencyLimitError,
  QuotaExceededError,
  PermissionError,
  NotFoundError,
  TemplateNotFoundError,
  ConflictError,
  NoCodeInterpreterError,
  PayloadTooLargeError,
  RangeNotSatisfiableError,
  RateLimitError,
  BadRequestError,
  ServerError,
  UnsupportedError,
  ServiceUnavailableError,
  CapacityError,
  InsufficientStorageError,
  NoSpaceError,
  UpstreamError,
  ConnectionError,
  RequestTimeoutError,
  errorFromResponse,
  type SandboxdErrorKind,
  type ValidationProblem,
} from './errors.js';
export type * from './types.js';
