/**
 * Setuid programs inside a sandbox (`sudo`, `su`): every sandbox runs with no_new_privs, so a
 * setuid-root file gives its caller nothing, unless its image says otherwise with the OCI
 * config label
 *
 *   org.sandboxd.setuid = allow
 *
 * (local/debian has it: E2B's base template gives its `user` passwordless sudo). Such a
 * sandbox's processes run without no_new_privs, so a setuid program lifts its caller to the
 * sandbox's root, and no further: that root is the same one sandboxd's API runs commands as
 * (`user: "root"`), uid 0 of the sandbox's user namespace (an unprivileged uid on the host),
 * with the same bounded capabilities (bundle/oci-config.ts SANDBOX_CAPABILITIES), the same
 * seccomp filter, in the same namespaces and cgroup. Any other value of the label fails the
 * create (`validation`), as a malformed service declaration does (service.ts).
 */
import { SandboxdError } from '@sandboxd/protocol';

export const SETUID_LABEL = 'org.sandboxd.setuid';

/** Whether image `ref`'s `labels` let its sandboxes' setuid programs work (see above). */
export function allowsSetuid(labels: Readonly<Record<string, string>> | undefined, ref: string): boolean {
  const v = labels?.[SETUID_LABEL];
  if (v === undefined) return false;
  if (v === 'allow') return true;
  throw new SandboxdError(
    'validation',
    `Image ${ref} has a malformed label ${SETUID_LABEL}: ${JSON.stringify(v.slice(0, 64))} (only "allow" is known)`,
    { image: ref, label: SETUID_LABEL },
  );
}
