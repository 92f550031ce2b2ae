/**
 * Pure helpers of the file browser: sandbox paths (always absolute, `/`-separated), sizes and
 * the order of a listing. No DOM, so they are unit-tested in Node (files-util.test.ts).
 */

/** The type of an entry, as the files routes name it. */
export type EntryType = 'file' | 'dir' | 'symlink' | 'other';

/**
 * `input` as an absolute path with no empty, `.` or `..` segments, the way a shell's `cd`
 * reads it: relative input is taken from `from`, `..` drops the segment before it and stops
 * at `/`. Surrounding white space is dropped (what a path bar usually means).
 */
export function normalizePath(input: string, from = '/'): string {
  const text = input.trim();
  const parts: string[] = [];
  for (const seg of (text.startsWith('/') ? text : `${from}/${text}`).split('/')) {
    if (seg === '' || seg === '.') continue;
    if (seg === '..') parts.pop();
    else parts.push(seg);
  }
  return `/${parts.join('/')}`;
}

/** The folder that holds `path` (`/` for `/` itself). */
export function parentPath(path: string): string {
  const p = normalizePath(path);
  return p === '/' ? '/' : p.slice(0, p.lastIndexOf('/')) || '/';
}

/** `name` inside the folder `dir`. */
export function childPath(dir: string, name: string): string {
  return dir === '/' ? `/${name}` : `${dir}/${name}`;
}

/** The breadcrumbs of a folder: `/`, then one per segment, each with the path it opens. */
export function breadcrumbs(path: string): Array<{ name: string; path: string }> {
  const out = [{ name: '/', path: '/' }];
  let at = '';
  for (const seg of normalizePath(path).split('/').slice(1)) {
    if (seg === '') continue;
    at += `/${seg}`;
    out.push({ name: seg, path: at });
  }
  return out;
}

/** `0 B`, `812 B`, `1.5 KiB`, `23 MiB`, `4.2 GiB`: binary units, one decimal below 10. */
export function formatSize(bytes: number): string {
  if (!Number.isFinite(bytes) || bytes < 0) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let v = bytes;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  if (u === 0) return `${v} B`;
  const shown = v < 10 ? Math.round(v * 10) / 10 : Math.round(v);
  // 1023.7 KiB rounds to 1024 KiB: say 1 MiB instead.
  if (shown >= 1024 && u < units.length - 1) return `1 ${units[u + 1]}`;
  return `${shown} ${units[u]}`;
}

/** Folders first, then everything else; by name within each (numbers in names compared as numbers). */
export function sortEntries<T extends { name: string; type: EntryType | string }>(entries: readonly T[]): T[] {
  const rank = (e: T) => (e.type === 'dir' ? 0 : 1);
  return [...entries].sort(
    (a, b) => rank(a) - rank(b) || a.name.localeCompare(b.name, undefined, { numeric: true }) || cmp(a.name, b.name),
  );
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
