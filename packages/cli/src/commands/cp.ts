import { randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, stat } from 'node:fs/promises';
import { basename, join, resolve, sep } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import { Command } from 'commander';
import { type FileEntry, NotFoundError, Sandbox } from '@sandboxd/sdk';
import * as tar from 'tar';
import { withExamples, type Context } from '../context.js';
import { parseRemote, remoteBase, remoteJoin, type RemotePath } from '../remote.js';
import { CliError } from '../ui.js';
import { shellQuote as q } from './exec.js';

/** Where a directory copy's archive goes in the sandbox while it is packed or unpacked. */
const tmpArchive = () => `/tmp/.sbx-cp-${randomBytes(8).toString('hex')}.tar`;

const endsWithSlash = (p: string) => p.endsWith('/') || p.endsWith(sep);

/** The remote entry at `path`, or undefined when nothing is there. */
async function remoteStat(sb: Sandbox, path: string): Promise<FileEntry | undefined> {
  return sb.files.stat(path).catch((e: unknown) => {
    if (e instanceof NotFoundError && typeof (e.details as { path?: unknown } | undefined)?.path === 'string')
      return undefined;
    throw e;
  });
}

/**
 * Uploads a local file (streamed, with its mode) or directory (packed as a tar on the fly,
 * streamed into the sandbox, unpacked there with the image's `tar`). As with `docker cp`:
 * into an existing directory it lands inside it, otherwise it is created under the name given.
 */
async function upload(ctx: Context, local: string, remote: RemotePath): Promise<string> {
  const st = await stat(local).catch(() => {
    throw new CliError(`${local}: no such file or directory`);
  });
  const sb = await Sandbox.get(remote.id, ctx.client());
  const there = await remoteStat(sb, remote.path);
  if (!there && endsWithSlash(remote.path)) throw new CliError(`${remote.id}:${remote.path}: no such directory`);
  const target = there?.type === 'dir' ? remoteJoin(remote.path, basename(resolve(local))) : remote.path;
  if (st.isFile()) {
    await sb.files.write(target, createReadStream(local), { size: st.size, mode: st.mode & 0o7777 });
    return target;
  }
  if (!st.isDirectory()) throw new CliError(`${local} is not a file or directory`);
  if (there && there.type !== 'dir')
    throw new CliError(`cannot copy a directory onto the file ${remote.id}:${remote.path}`);
  const archive = tmpArchive();
  await sb.files.write(archive, tar.c({ cwd: local, portable: true }, ['.']));
  const r = await sb
    .exec(`mkdir -p ${q(target)} && tar -x -o -f ${q(archive)} -C ${q(target)}; rc=$?; rm -f ${q(archive)}; exit $rc`, {
      timeoutMs: 3_600_000,
    })
    .catch(async (e: unknown) => {
      await sb.files.remove(archive).catch(() => {});
      throw e;
    });
  if (r.exitCode !== 0)
    throw new CliError(`unpacking in the sandbox failed (directory copies need tar in the image): ${r.stderr.trim()}`);
  return target;
}

/**
 * Downloads a sandbox file (streamed, with its mode) or directory (packed with the image's
 * `tar` into a temporary archive in the sandbox, downloaded streamed, unpacked here).
 */
async function download(ctx: Context, remote: RemotePath, local: string): Promise<string> {
  const sb = await Sandbox.get(remote.id, ctx.client());
  const entry = await sb.files.stat(remote.path);
  const here = await stat(local).catch(() => undefined);
  if (!here && endsWithSlash(local)) throw new CliError(`${local}: no such directory`);
  const name = remoteBase(remote.path);
  const target = here?.isDirectory() ? join(local, name === '/' ? 'root' : name) : local;
  const body = (s: ReadableStream<Uint8Array>) => Readable.fromWeb(s as unknown as NodeReadableStream<Uint8Array>);
  if (entry.type === 'file' || entry.type === 'symlink') {
    const content = await sb.files.read(remote.path, { format: 'stream' });
    await pipeline(body(content), createWriteStream(target, { mode: entry.mode & 0o7777 }));
    return target;
  }
  if (entry.type !== 'dir') throw new CliError(`${remote.id}:${remote.path} is not a file or directory`);
  if (['/', '/tmp'].includes(remote.path.replace(/\/+$/, '') || '/'))
    throw new CliError('copying / or /tmp out is not supported (the archive is made in /tmp): copy the folders inside');
  const there = await stat(target).catch(() => undefined);
  if (there && !there.isDirectory()) throw new CliError(`cannot copy a directory onto the file ${target}`);
  const archive = tmpArchive();
  try {
    const r = await sb.exec(`tar -c -f ${q(archive)} -C ${q(remote.path)} .`, { timeoutMs: 3_600_000 });
    if (r.exitCode !== 0)
      throw new CliError(`packing in the sandbox failed (directory copies need tar in the image): ${r.stderr.trim()}`);
    await mkdir(target, { recursive: true });
    const content = await sb.files.read(archive, { format: 'stream' });
    await pipeline(body(content), tar.x({ cwd: target, preserveOwner: false }));
  } finally {
    await sb.files.remove(archive).catch(() => {});
  }
  return target;
}

/** `sbx cp SRC DST`: copies a file or directory into or out of a sandbox. */
export function cpCommand(ctx: Context): Command {
  const cmd = new Command('cp')
    .description(
      'copy a file or directory between this machine and a sandbox; ID:/path names the sandbox side (directories need tar in the image)',
    )
    .argument('<src>', 'local path, or ID:/path in a sandbox')
    .argument('<dst>', 'local path, or ID:/path in a sandbox (into an existing directory, the copy goes inside it)')
    .option('-q, --quiet', 'print nothing on success')
    .action(async (src: string, dst: string, o: { quiet?: boolean }) => {
      const from = parseRemote(src);
      const to = parseRemote(dst);
      if (Boolean(from) === Boolean(to))
        throw new CliError('exactly one of <src> and <dst> must be ID:/path in a sandbox, the other a local path');
      const target = from ? await download(ctx, from, dst) : await upload(ctx, src, to!);
      if (!o.quiet) process.stdout.write(`Copied ${src} to ${to ? `${to.id}:${target}` : target}\n`);
    });
  return withExamples(
    cmd,
    'sbx cp ./data.csv sbx_abc...:/work/',
    'sbx cp ./project sbx_abc...:/work/project',
    'sbx cp sbx_abc...:/work/out ./results',
  );
}
