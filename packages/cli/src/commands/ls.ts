import { Command } from 'commander';
import { type FileEntry, Sandbox, type SandboxState, ValidationError } from '@sandboxd/sdk';
import { withExamples, type Context } from '../context.js';
import { parseRemote, type RemotePath } from '../remote.js';
import { CliError, collect, parsePairs, printJson, relative, table, type Palette } from '../ui.js';
import { formatMetadata } from './create.js';

/** `rwxr-xr-x` with the type first, as `ls -l` shows it. */
export function modeString(e: Pick<FileEntry, 'type' | 'mode'>): string {
  const type = { file: '-', dir: 'd', symlink: 'l', other: '?' }[e.type] ?? '?';
  let bits = '';
  for (let shift = 6; shift >= 0; shift -= 3) {
    const b = (e.mode >> shift) & 7;
    bits += `${b & 4 ? 'r' : '-'}${b & 2 ? 'w' : '-'}${b & 1 ? 'x' : '-'}`;
  }
  return type + bits;
}

/** An entry's name relative to the listed directory (deeper levels keep their folders). */
function nameUnder(base: string, e: FileEntry): string {
  const prefix = base.endsWith('/') ? base : `${base}/`;
  return e.path.startsWith(prefix) ? e.path.slice(prefix.length) : e.name;
}

/** `2026-11-24 10:00` in local time. */
function when(iso: string): string {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  const p = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}`;
}

/** Prints the entries of a sandbox directory (or the one entry of a file). */
async function listFiles(
  ctx: Context,
  at: RemotePath,
  o: { long?: boolean; depth?: string; json?: boolean },
): Promise<void> {
  const depth = o.depth === undefined ? undefined : Number(o.depth);
  if (depth !== undefined && (!Number.isInteger(depth) || depth < 1 || depth > 10))
    throw new CliError('--depth must be a whole number from 1 to 10');
  const sb = await Sandbox.get(at.id, ctx.client());
  let entries: FileEntry[];
  let truncated = false;
  let base = at.path;
  try {
    const list = await sb.files.list(at.path, { depth });
    entries = list;
    truncated = list.truncated;
  } catch (e) {
    // Not a directory: show the file itself, as ls does.
    if (!(e instanceof ValidationError)) throw e;
    const one = await sb.files.stat(at.path);
    if (one.type === 'dir') throw e;
    entries = [one];
    base = '';
  }
  if (o.json) return printJson(entries);
  const p = ctx.out;
  const label = (e: FileEntry) => {
    const n = base ? nameUnder(base, e) : e.path;
    if (e.type === 'dir') return p.cyan(`${n}/`);
    if (e.type === 'symlink') return o.long && e.symlinkTarget ? `${p.yellow(n)} -> ${e.symlinkTarget}` : p.yellow(n);
    return n;
  };
  if (o.long) {
    const rows = entries.map((e) => [modeString(e), e.owner, String(e.size), when(e.modifiedAt), label(e)]);
    process.stdout.write(table(['MODE', 'OWNER', 'SIZE', 'MODIFIED', 'NAME'], rows, p));
  } else if (entries.length) process.stdout.write(`${entries.map(label).join('\n')}\n`);
  if (truncated) process.stderr.write(ctx.err.yellow('warning: the listing stopped at 10,000 entries\n'));
}

const STATES: readonly SandboxState[] = ['started', 'paused', 'stopped', 'error'];

/** Prints the account's sandboxes as a table, newest first. */
async function listSandboxes(ctx: Context, o: { state?: string; metadata?: string[]; json?: boolean }): Promise<void> {
  if (o.state !== undefined && !(STATES as readonly string[]).includes(o.state))
    throw new CliError(`--state must be one of ${STATES.join(', ')}`);
  const metadata = parsePairs(o.metadata ?? [], '--metadata');
  const list = await Sandbox.list({ state: o.state as SandboxState | undefined, metadata }, ctx.client());
  if (o.json) return printJson(list.map((s) => s.info));
  if (list.length === 0) return void process.stdout.write('No sandboxes.\n');
  const p: Palette = ctx.out;
  const paint = (s: string) =>
    s === 'started' ? p.green(s) : s === 'paused' ? p.yellow(s) : s === 'error' ? p.red(s) : p.dim(s);
  // STOPS: when a started sandbox stops (or pauses: "pause in 9m"); EXPIRES: when a paused or
  // stopped one is deleted with what it kept.
  const withMeta = list.some((s) => Object.keys(s.metadata ?? {}).length > 0);
  const rows = list.map((s) => [
    s.id,
    s.name,
    s.state === 'paused' && s.pausedMemory === 'disk' ? `${paint(s.state)} (disk)` : paint(s.state),
    s.image,
    s.isolation,
    relative(s.info.createdAt),
    s.state === 'started' ? `${s.onTimeout === 'pause' ? 'pause ' : ''}${relative(s.info.stopAt)}` : '-',
    s.state !== 'started' && s.info.expiresAt ? relative(s.info.expiresAt) : '-',
    ...(withMeta ? [formatMetadata(s.metadata) || '-'] : []),
  ]);
  const header = [
    'ID',
    'NAME',
    'STATE',
    'IMAGE',
    'ISOLATION',
    'CREATED',
    'STOPS',
    'EXPIRES',
    ...(withMeta ? ['METADATA'] : []),
  ];
  process.stdout.write(table(header, rows, p));
}

/** `sbx ls`: the account's sandboxes; `sbx ls ID:/path`: the files of a sandbox directory. */
export function lsCommand(ctx: Context): Command {
  const cmd = new Command('ls')
    .alias('list')
    .description('list sandboxes, newest first; with ID:/path, the files of a directory in a sandbox')
    .argument('[ID:/path]', 'a directory (or file) in a sandbox')
    .option('--state <state>', 'only sandboxes in this state: started, paused, stopped or error')
    .option(
      '-m, --metadata <KEY=VALUE>',
      'only sandboxes with this metadata pair (repeatable: all must match)',
      collect,
    )
    .option('-l, --long', 'files: mode, owner, size and modification time')
    .option('--depth <n>', 'files: how many levels deep (1 to 10, default 1)')
    .option('--json', 'print the sandboxes or files as JSON')
    .action(
      async (
        target: string | undefined,
        o: { state?: string; metadata?: string[]; long?: boolean; depth?: string; json?: boolean },
      ) => {
        if (target === undefined) {
          if (o.long || o.depth !== undefined) throw new CliError('-l and --depth list files: give ID:/path');
          return listSandboxes(ctx, o);
        }
        const at = parseRemote(target);
        if (!at) throw new CliError(`expected ID:/path, the directory of a sandbox (got "${target}")`);
        if (o.state !== undefined || o.metadata) throw new CliError('--state and --metadata list sandboxes, not files');
        return listFiles(ctx, at, o);
      },
    );
  return withExamples(
    cmd,
    'sbx ls',
    'sbx ls --state started --json',
    'sbx ls --state paused --metadata team=ml',
    'sbx ls -l sbx_abc...:/work',
    'sbx ls --depth 3 sbx_abc...:/etc',
  );
}
