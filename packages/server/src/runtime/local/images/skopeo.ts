/**
 * skopeo, run so that the host's own containers config cannot change what it does: our own
 * signature policy, our own auth file (credentials never on a command line), linux/<host arch>
 * picked from multi-arch images, temp files inside the caller's work dir.
 */
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { hostArch } from './oci-read.js';
import { runTool, toolEnv, ToolError } from './run.js';

export interface Credentials {
  username: string;
  password: string;
}

/** The dial guard a namespaced pull goes out through, and the loopback listeners it needs. */
export interface NetnsExit {
  socket: string;
  token: string;
  listeners: Array<{ bind: string; port: number; target: string }>;
}

const NETNS_PULL = fileURLToPath(new URL('./netns-pull.ts', import.meta.url));

let isolation: Promise<boolean> | undefined;

/**
 * True when pulls can run in a network namespace of their own: root, `unshare` installed and
 * allowed to make one (a container without CAP_SYS_ADMIN is not). Tried once per process.
 */
export function canIsolatePulls(): Promise<boolean> {
  isolation ??=
    process.getuid?.() === 0 && existsSync('/usr/bin/unshare')
      ? runTool('unshare', ['--net', '--', 'true'], { timeoutMs: 10_000 }).then(
          () => true,
          () => false,
        )
      : Promise.resolve(false);
  return isolation;
}

export interface CopyOptions {
  /** Work dir for policy/auth files and skopeo's temp files. */
  work: string;
  timeoutMs: number;
  /** Credentials for the source registry (written to a 0600 auth file in `work`). */
  credentials?: { registry: string; creds: Credentials };
  /** Reach the source registry over plain http / without TLS verification. */
  insecure?: boolean;
  /** Extra environment (the pull's proxy, see dial-guard.ts), over {@link toolEnv}'s. */
  env?: NodeJS.ProcessEnv;
  /** Run skopeo in a network namespace of its own whose only way out is this guard (netns-pull.ts). */
  netns?: NetnsExit;
  onStderr?: (chunk: string) => void;
}

/**
 * `skopeo copy <src> <dest>` (transport strings, e.g. `docker://h/x:1`, `oci:/dir:img`).
 * Throws ToolError on failure.
 */
export async function skopeoCopy(src: string, dest: string, opts: CopyOptions): Promise<void> {
  const policy = join(opts.work, 'policy.json');
  await writeFile(policy, JSON.stringify({ default: [{ type: 'insecureAcceptAnything' }] }));
  const auth = join(opts.work, 'auth.json');
  const auths: Record<string, { auth: string }> = {};
  if (opts.credentials) {
    const { username, password } = opts.credentials.creds;
    auths[opts.credentials.registry] = { auth: Buffer.from(`${username}:${password}`).toString('base64') };
  }
  await writeFile(auth, JSON.stringify({ auths }), { mode: 0o600 });
  const args = [
    '--policy',
    policy,
    '--override-os',
    'linux',
    '--override-arch',
    hostArch(),
    'copy',
    '--quiet',
    '--src-authfile',
    auth,
    ...(opts.insecure ? ['--src-tls-verify=false'] : []),
    src,
    dest,
  ];
  // Blobs being fetched and archive extraction go to TMPDIR: keep them in the work dir.
  const env = toolEnv({ ...opts.env, TMPDIR: opts.work, REGISTRY_AUTH_FILE: auth });
  if (opts.netns) {
    const n = opts.netns;
    const argv = ['--net', '--', process.execPath, NETNS_PULL, n.socket, JSON.stringify(n.listeners), '--', 'skopeo'];
    await runTool('unshare', [...argv, ...args], {
      timeoutMs: opts.timeoutMs,
      env: { ...env, SBX_GUARD_TOKEN: n.token },
      onStderr: opts.onStderr,
    });
    return;
  }
  await runTool('skopeo', args, { timeoutMs: opts.timeoutMs, env, onStderr: opts.onStderr });
}

const NOT_FOUND = [
  /manifest unknown/i,
  /name unknown/i,
  /not found/i,
  /status 404/i,
  /repository name not known/i,
  /requested access to the resource is denied/i,
  /unauthorized/i,
  /authentication required/i,
  /no such host/i,
  /connection refused/i,
  /no route to host/i,
  /network is unreachable/i,
  /server misbehaving/i,
  /server gave HTTP response to HTTPS client/i,
  /certificate/i,
  /no image found in (manifest list|image index)/i,
  /choosing an image from manifest list/i,
];

/**
 * True when a failed pull means "there is no such image for us" (unknown registry,
 * repository, tag or platform, or access denied) rather than a failure on this host.
 */
export function isNotFound(e: unknown): boolean {
  return e instanceof ToolError && !e.timedOut && NOT_FOUND.some((r) => r.test(e.stderr));
}
