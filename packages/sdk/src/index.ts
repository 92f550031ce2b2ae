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
export { Sandbox, type Connection, type ExecCallOptions } from './sandbox.js';
export { Terminal, Terminals, type TerminalConnectOptions } from './terminal.js';
export { SandboxdClient, SandboxesApi, VolumesApi, AccountApi, KeysApi, EventsApi } from './client.js';
export { ImagesApi, IMAGE_JOB_TIMEOUT_MS, type ImageJobOptions, type ImageImportOptions } from './images.js';
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
  PermissionError,
  NotFoundError,
  TemplateNotFoundError,
  ConflictError,
  PayloadTooLargeError,
  RangeNotSatisfiableError,
  RateLimitError,
  BadRequestError,
  ServerError,
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
