/**
 * Test helpers for the image store: temp dirs, a real loopback OCI registry (Debian's
 * docker-registry) run as a child process, pushing layouts into it, bcrypt htpasswd files.
 * Everything started here is stopped by pid; nothing reaches beyond 127.0.0.1.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runTool, toolEnv } from '../src/runtime/local/images/run.js';

/** A fresh temp dir and a function that deletes it. */
export async function tempDir(label: string): Promise<{ dir: string; cleanup: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), `sbx-images-${label}-`));
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const addr = s.address();
      s.close(() => (typeof addr === 'object' && addr ? resolve(addr.port) : reject(new Error('no port'))));
    });
  });
}

/**
 * A bcrypt htpasswd line for docker-registry, made with Python's `crypt` (glibc/libxcrypt
 * blowfish); null when this host cannot make one.
 */
export async function htpasswdLine(user: string, password: string): Promise<string | null> {
  const py =
    'import crypt,sys; print(sys.argv[1] + ":" + crypt.crypt(sys.argv[2], crypt.mksalt(crypt.METHOD_BLOWFISH)))';
  try {
    const out = (
      await runTool('/usr/bin/python3', ['-W', 'ignore', '-c', py, user, password], { timeoutMs: 20_000 })
    ).trim();
    return /^[^:]+:\$2[aby]\$/.test(out) ? out : null;
  } catch {
    return null;
  }
}

export interface TestRegistry {
  /** `127.0.0.1:<port>` */
  host: string;
  pid: number;
  stop(): Promise<void>;
}

/** Starts docker-registry on a free loopback port; resolves once `/v2/` answers. */
export async function startRegistry(dir: string, opts: { htpasswd?: string } = {}): Promise<TestRegistry> {
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  const auth = opts.htpasswd
    ? `auth:\n  htpasswd:\n    realm: sandboxd-test\n    path: ${join(dir, 'htpasswd')}\n`
    : '';
  if (opts.htpasswd) await writeFile(join(dir, 'htpasswd'), `${opts.htpasswd}\n`);
  const config =
    `version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n` +
    `storage:\n  filesystem:\n    rootdirectory: ${join(dir, 'data')}\n  delete:\n    enabled: true\n` +
    `http:\n  addr: ${host}\n  secret: ${randomBytes(16).toString('hex')}\n${auth}`;
  await writeFile(join(dir, 'config.yml'), config);
  let stderr = '';
  const child: ChildProcess = spawn('/usr/bin/docker-registry', ['serve', join(dir, 'config.yml')], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: toolEnv(),
  });
  child.stderr?.setEncoding('utf8').on('data', (d: string) => (stderr = (stderr + d).slice(-4000)));
  const pid = child.pid ?? 0;
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    process.kill(pid, 'SIGTERM');
    const t = setTimeout(() => {
      if (child.exitCode === null && child.signalCode === null) process.kill(pid, 'SIGKILL');
    }, 3000);
    await exited;
    clearTimeout(t);
  };
  const deadline = Date.now() + 15_000;
  for (;;) {
    const status = await fetch(`http://${host}/v2/`).then(
      (r) => r.status,
      () => 0,
    );
    if (status === 200 || status === 401) break;
    if (child.exitCode !== null || Date.now() > deadline) {
      await stop();
      throw new Error(`docker-registry did not start: ${stderr}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { host, pid, stop };
}

/** Pushes `oci:<layout>:<tag>` to `docker://<dest>` over plain http (`all`: every platform of an index). */
export async function pushLayout(
  layout: string,
  tag: string,
  dest: string,
  work: string,
  creds?: { username: string; password: string },
  all = false,
): Promise<void> {
  const policy = join(work, 'push-policy.json');
  await writeFile(policy, JSON.stringify({ default: [{ type: 'insecureAcceptAnything' }] }));
  const args = ['--policy', policy, 'copy', '--quiet', '--dest-tls-verify=false'];
  if (creds) args.push('--dest-creds', `${creds.username}:${creds.password}`);
  if (all) args.push('--all');
  await runTool('skopeo', [...args, `oci:${layout}:${tag}`, `docker://${dest}`], {
    timeoutMs: 120_000,
    env: toolEnv({ TMPDIR: work }),
  });
}

/** Runs GNU tar to pack `dir` into `out` with numeric owners, entries sorted. */
export async function tarDir(dir: string, out: string): Promise<void> {
  await runTool('tar', ['--create', '--file', out, '--numeric-owner', '--sort=name', '-C', dir, '.'], {
    timeoutMs: 60_000,
  });
}
