import { SandboxdError } from '@sandboxd/protocol';
import type { DriverFiles, FileRead } from './files.js';

/** One line of a sandbox's `/etc/passwd`. */
export interface PasswdEntry {
  name: string;
  uid: number;
  gid: number;
  /** Home directory as written (may be empty). */
  home: string;
  shell: string;
}

/** The entries of an `/etc/passwd` text; malformed lines (and comments) are skipped. */
export function parsePasswd(text: string): PasswdEntry[] {
  const out: PasswdEntry[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const f = line.split(':');
    if (f.length < 7 || !f[0] || !/^\d+$/.test(f[2]) || !/^\d+$/.test(f[3])) continue;
    out.push({ name: f[0], uid: Number(f[2]), gid: Number(f[3]), home: f[5], shell: f[6].trimEnd() });
  }
  return out;
}

/**
 * The entry a user reference names, in the way drivers take users: `root`, a numeric `uid`
 * or `uid:gid` (found by uid; `gid` then overrides the entry's), or a name. Undefined when
 * the sandbox has no such user (a numeric id needs no entry to run, but has none to tell).
 */
export function findUser(entries: PasswdEntry[], user: string): PasswdEntry | undefined {
  const numeric = /^(\d+)(?::(\d+))?$/.exec(user);
  if (numeric) {
    const e = entries.find((x) => x.uid === Number(numeric[1]));
    return e && numeric[2] !== undefined ? { ...e, gid: Number(numeric[2]) } : e;
  }
  const e = entries.find((x) => x.name === user);
  if (e || user !== 'root') return e;
  return entries.find((x) => x.uid === 0);
}

/** Largest /etc/passwd read from a running sandbox. */
const MAX_PASSWD_BYTES = 4 << 20;

/**
 * The running sandbox's own /etc/passwd (users added inside it included), read by the
 * sandbox's agent as root. No file: no entries. Throws the driver's errors otherwise.
 */
export async function readSandboxPasswd(files: DriverFiles, id: string): Promise<PasswdEntry[]> {
  let r: FileRead;
  try {
    r = await files.read(id, '/etc/passwd', { user: 'root' });
  } catch (e) {
    if (e instanceof SandboxdError && e.kind === 'not_found' && isAboutPath(e.details)) return [];
    throw e;
  }
  if (r.unsatisfiable) return [];
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of r.body as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > MAX_PASSWD_BYTES) {
      r.body.destroy();
      throw new SandboxdError('internal', `The sandbox's /etc/passwd is larger than ${MAX_PASSWD_BYTES} bytes`);
    }
    chunks.push(c);
  }
  return parsePasswd(Buffer.concat(chunks).toString('utf8'));
}

function isAboutPath(details: unknown): boolean {
  return typeof details === 'object' && details !== null && 'path' in details;
}

/**
 * The numeric `uid[:gid]` of `user` in running sandbox `id` (an OCI runtime takes no names):
 * numbers as given, names from the sandbox's own /etc/passwd, `root` as 0:0 without one.
 * No user given: `fallback` (the image's). `validation` for a name the sandbox lacks.
 */
export async function numericUser(
  files: DriverFiles,
  id: string,
  fallback: string,
  user: string | undefined,
): Promise<string> {
  if (user === undefined) return fallback;
  if (/^\d+(:\d+)?$/.test(user)) return user;
  const e = findUser(await readSandboxPasswd(files, id), user);
  if (e) return `${e.uid}:${e.gid}`;
  if (user === 'root') return '0:0';
  throw new SandboxdError('validation', `Unknown user in the sandbox: ${user}`, { user });
}
