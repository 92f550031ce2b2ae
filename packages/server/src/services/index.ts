import type { AccountService } from './accounts.js';
import type { AuthService } from './auth.js';
import type { CapacityService } from './capacity.js';
import type { CodeService } from './code.js';
import type { EventService } from './events.js';
import type { ExecService } from './exec.js';
import type { FileService } from './files.js';
import type { ProcessService } from './processes.js';
import type { ImageService } from './images.js';
import type { LifecycleService } from './lifecycle.js';
import type { SecretService } from './secrets.js';
import type { SnapshotService } from './snapshots.js';
import type { SandboxService } from './sandboxes.js';
import type { TerminalService } from './terminals.js';
import type { TimeoutService } from './timeout.js';
import type { VolumeService } from './volumes.js';

/** Every service, as the composition root (app.ts) builds them; what the HTTP routes call. */
import type { BuildsApi } from '../builds/types.js';

export interface Services {
  sandboxes: SandboxService;
  /** The host's room for new sandboxes (/healthz, /metrics; creates check it). */
  capacity: CapacityService;
  timeout: TimeoutService;
  /** Pause, resume, stop, start. */
  lifecycle: LifecycleService;
  snapshots: SnapshotService;
  exec: ExecService;
  processes: ProcessService;
  /** The code interpreter of sandboxes made from local/code-interpreter (a relay to port 49999). */
  code: CodeService;
  files: FileService;
  accounts: AccountService;
  auth: AuthService;
  events: EventService;
  volumes: VolumeService;
  images: ImageService;
  terminals: TerminalService;
  /** Secrets that never enter a sandbox: their values, the rules' checks, the audit trail. */
  secrets: SecretService;
  /** Image builds and templates (services/builds.ts); E2B's template door uses it too. */
  builds: BuildsApi;
}

export type { ServiceDeps } from './context.js';
