/**
 * The local driver's isolation tiers: `container` (crun, or runc) and `gvisor` (runsc, when
 * installed: ../gvisor/). Every sandbox record names its tier in `spec.isolation`; the
 * driver's parts pick the runtime of a sandbox with {@link runtimeOf}.
 */
import { type Isolation, SandboxdError } from '@sandboxd/protocol';
import type { OciRuntime } from './commands/oci-runtime.js';

/** The runtime of each tier; `gvisor` absent when this host does not offer it. */
export interface TierRuntimes {
  crun: OciRuntime;
  gvisor?: OciRuntime;
}

/** The runtime that runs sandboxes of `isolation` (absent: `container`); `validation` when not offered here. */
export function runtimeOf(h: TierRuntimes, isolation: Isolation | undefined): OciRuntime {
  if (isolation !== 'gvisor') return h.crun;
  if (!h.gvisor)
    throw new SandboxdError(
      'validation',
      'isolation "gvisor" is not offered by this host (gVisor\'s runsc is not installed)',
      {
        isolation,
        offered: ['container'],
      },
    );
  return h.gvisor;
}

/** Every runtime of the driver (a container of unknown tier is looked for in each). */
export function allRuntimes(h: TierRuntimes): OciRuntime[] {
  return h.gvisor ? [h.crun, h.gvisor] : [h.crun];
}
