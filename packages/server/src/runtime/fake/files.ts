import { posix } from 'node:path';
import { Readable } from 'node:stream';
import { SandboxdError } from '@sandboxd/protocol';
import { type CopyEntry, decodeCopyStream, encodeCopyStream } from '../copy-stream.js';
import type { DriverFiles } from '../files.js';

/** What unpack made in a fake sandbox, by absolute path: with its mode and owner. */
export interface FakeNode {
  type: 'file' | 'dir' | 'symlink';
  mode: number;
  uid: number;
  gid: number;
  target?: string;
  data?: Buffer;
  /** `data` as the fake shell's files hold it (a later `echo > file` there replaces it). */
  text?: string;
}

/** The files of one fake sandbox: `files` (the fake shell's, path -> text) and `tree` (what copies made). */
export interface FakeFileSystem {
  files: Map<string, string>;
  tree: Map<string, FakeNode>;
}

const ROOT_DIR: FakeNode = { type: 'dir', mode: 0o755, uid: 0, gid: 0 };
const MAX_LINKS = 40;

/** Path segments, compared as the agent sorts them: pre-order, by name per directory. */
function compareTree(a: string, b: string): number {
  const x = a.split('/');
  const y = b.split('/');
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] < y[i] ? -1 : 1;
  return x.length - y.length;
}

function parentsOf(path: string): string[] {
  const out: string[] = [];
  for (let p = posix.dirname(path); p !== '/'; p = posix.dirname(p)) out.unshift(p);
  return out;
}

/**
 * The fake driver's file operations: `unpack` and `pack` (copy streams) work in memory as
 * the agent's do (modes, owners, symlinks never followed, type clashes refused); the other
 * operations are not simulated (file routes are proven on the real runtime only).
 */
export function fakeFiles(running: (id: string) => FakeFileSystem): DriverFiles {
  const none = () => Promise.reject(new SandboxdError('internal', 'The fake runtime has no file operations'));
  return {
    stat: none,
    list: none,
    mkdir: none,
    move: none,
    remove: none,
    read: none,
    write: none,
    watch: none,
    whoami: none,
    async unpack(id, dest, body) {
      const fs = running(id);
      if (!dest.startsWith('/')) throw new SandboxdError('validation', `The destination must be absolute: ${dest}`);
      const root = posix.normalize(dest);
      const kind = (p: string): FakeNode['type'] | undefined => {
        const n = fs.tree.get(p);
        if (n) return n.type;
        if (fs.files.has(p)) return 'file';
        const under = `${p === '/' ? '' : p}/`;
        for (const k of [...fs.tree.keys(), ...fs.files.keys()]) if (k.startsWith(under)) return 'dir';
        return undefined;
      };
      const mkdirs = (p: string) => {
        for (const d of [...parentsOf(p), p]) {
          if (d === '/') continue;
          const k = kind(d);
          if (!k) fs.tree.set(d, { ...ROOT_DIR });
          else if (k !== 'dir') throw new SandboxdError('validation', `Not a directory: ${d}`, { path: d });
        }
      };
      mkdirs(root);
      const later: Array<[string, number]> = [];
      let entries = 0;
      let bytes = 0;
      for await (const e of decodeCopyStream(body)) {
        const full = e.path ? posix.join(root, e.path) : root;
        for (const p of parentsOf(full).filter((x) => x.length > root.length)) {
          const k = kind(p);
          if (k === 'symlink' || (k && k !== 'dir'))
            throw new SandboxdError(
              'conflict',
              `A directory above this entry is not a directory (symlinks are not followed): ${full}`,
              { path: full },
            );
          if (!k) fs.tree.set(p, { ...ROOT_DIR });
        }
        const k = kind(full);
        if (e.type === 'dir') {
          if (k && k !== 'dir')
            throw new SandboxdError('conflict', `A directory entry where something else exists: ${full}`, {
              path: full,
            });
          const had = fs.tree.get(full);
          fs.tree.set(full, { type: 'dir', mode: had?.mode ?? 0o700, uid: e.uid, gid: e.gid });
          later.push([full, e.mode]);
        } else {
          if (k === 'dir')
            throw new SandboxdError('conflict', `A ${e.type} entry where a directory exists: ${full}`, { path: full });
          const node: FakeNode = { type: e.type, mode: e.mode, uid: e.uid, gid: e.gid };
          if (e.type === 'symlink') {
            node.target = e.target;
            node.mode = 0o777;
            fs.files.delete(full);
          } else {
            const parts: Buffer[] = [];
            for await (const c of e.body!()) parts.push(Buffer.from(c));
            node.data = Buffer.concat(parts);
            node.text = node.data.toString('utf8');
            fs.files.set(full, node.text);
            bytes += e.size;
          }
          fs.tree.set(full, node);
        }
        entries++;
      }
      for (const [p, mode] of later.reverse()) fs.tree.get(p)!.mode = mode;
      return { entries, bytes };
    },
    async pack(id, path, o = {}) {
      const fs = running(id);
      const node = (p: string): FakeNode | undefined => {
        const n = fs.tree.get(p);
        const text = fs.files.get(p);
        if (n && (n.type !== 'file' || text === n.text)) return n;
        if (text !== undefined) {
          const data = Buffer.from(text);
          return { type: 'file', mode: n?.mode ?? 0o644, uid: n?.uid ?? 0, gid: n?.gid ?? 0, data, text };
        }
        const under = `${p === '/' ? '' : p}/`;
        for (const k of [...fs.tree.keys(), ...fs.files.keys()]) if (k.startsWith(under)) return { ...ROOT_DIR };
        return undefined;
      };
      let at = posix.normalize(path);
      let n = node(at);
      for (let i = 0; o.follow && n?.type === 'symlink' && i < MAX_LINKS; i++) {
        at = posix.resolve(posix.dirname(at), n.target!);
        n = node(at);
      }
      if (!n) throw new SandboxdError('not_found', `No such file or directory: ${path}`, { path });
      const entry = (rel: string, x: FakeNode): CopyEntry => {
        const e: CopyEntry = { path: rel, type: x.type, mode: x.mode, uid: x.uid, gid: x.gid, size: 0 };
        if (x.type === 'symlink') e.target = x.target;
        if (x.type === 'file') {
          const data = x.data ?? Buffer.alloc(0);
          e.size = data.length;
          e.body = async function* () {
            yield data;
          };
        }
        return e;
      };
      const name = posix.basename(path);
      if (n.type !== 'dir') return Readable.from(encodeCopyStream([entry(name, n)]));
      const under = `${at === '/' ? '' : at}/`;
      const below = new Set<string>();
      for (const k of [...fs.tree.keys(), ...fs.files.keys()])
        if (k.startsWith(under)) {
          below.add(k);
          for (const p of parentsOf(k)) if (p.startsWith(under)) below.add(p);
        }
      const rels = [...below].map((k) => k.slice(under.length)).sort(compareTree);
      const entries = [entry('', n), ...rels.map((r) => entry(r, node(under + r)!))];
      // Nothing below a symlink: a link is an entry, never a dir of the copy.
      const links = entries.filter((e) => e.type === 'symlink').map((e) => `${e.path}/`);
      return Readable.from(encodeCopyStream(entries.filter((e) => !links.some((l) => e.path.startsWith(l)))));
    },
  };
}
