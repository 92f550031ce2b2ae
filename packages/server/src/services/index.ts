import { AccountService } from './accounts.js';
import { AuthService } from './auth.js';
import type { ServiceDeps } from './context.js';
import { EventService } from './events.js';
import { ExecService } from './exec.js';
import { ImageService } from './images.js';
import { SandboxService } from './sandboxes.js';
import { TerminalService } from './terminals.js';
import { TimeoutService } from './timeout.js';
import { VolumeService } from './volumes.js';

/** Every service, wired to the same dependencies. */
export interface Services {
  sandboxes: SandboxService;
  timeout: TimeoutService;
  exec: ExecService;
  accounts: AccountService;
  auth: AuthService;
  events: EventService;
  volumes: VolumeService;
  images: ImageService;
  terminals: TerminalService;
}

/** Builds the services; called by the composition root only. */
export function createServices(d: ServiceDeps): Services {
  const sandboxes = new SandboxService(d);
  return {
    sandboxes,
    timeout: new TimeoutService(d, sandboxes),
    exec: new ExecService(d, sandboxes),
    accounts: new AccountService(d),
    auth: new AuthService(d),
    events: new EventService(d),
    volumes: new VolumeService(d),
    images: new ImageService(d),
    terminals: new TerminalService(d, sandboxes),
  };
}

export type { ServiceDeps } from './context.js';
