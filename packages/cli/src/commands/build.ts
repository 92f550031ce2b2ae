/**
 * `sbx build` builds a template from a Dockerfile and a context (logs as they come, a
 * progress line on a TTY); builds.ts has `sbx builds` and `sbx templates`.
 */
import { openAsBlob, readFileSync, statSync } from 'node:fs';
import { isAbsolute, relative, resolve, sep } from 'node:path';
import { Readable } from 'node:stream';
import { Command } from 'commander';
import { BuildError, type Build, type BuildContext, type BuildLogEvent, type BuildParams } from '@sandboxd/sdk';
import { withExamples, type Context } from '../context.js';
import { BuildDisplay } from '../progress.js';
import { CliError, collect, formatBytes, printJson } from '../ui.js';

/** Options of `sbx build`. */
interface BuildFlags {
  tag?: string;
  file?: string;
  buildArg?: string[];
  allowDomain?: string[];
  cache?: boolean;
  quiet?: boolean;
  json?: boolean;
}

/** `name[:tag]` (a leading `templates/` is dropped) as its parts. Throws CliError. */
export function parseTemplateRef(ref: string, flag = '-t'): { name: string; tag?: string } {
  const r = ref.startsWith('templates/') ? ref.slice('templates/'.length) : ref;
  const i = r.indexOf(':');
  const name = i < 0 ? r : r.slice(0, i);
  const tag = i < 0 ? undefined : r.slice(i + 1);
  if (name === '' || tag === '' || tag?.includes(':'))
    throw new CliError(`${flag} must be NAME or NAME:TAG, e.g. web or web:v1 (got "${ref}")`);
  return { name, tag };
}

/**
 * `--build-arg K=V` pairs; `--build-arg K` takes K from the environment and is left out
 * when it is not set there (as docker does). Throws CliError.
 */
export function parseBuildArgs(pairs: string[]): Record<string, string> | undefined {
  if (pairs.length === 0) return undefined;
  const out: Record<string, string> = {};
  for (const p of pairs) {
    const i = p.indexOf('=');
    const k = i < 0 ? p : p.slice(0, i);
    if (k === '' || /\s/.test(k)) throw new CliError(`--build-arg must be NAME=VALUE or NAME (got "${p}")`);
    if (i >= 0) out[k] = p.slice(i + 1);
    else if (process.env[k] !== undefined) out[k] = process.env[k];
  }
  return out;
}

/** Reads all of stdin. */
async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * What to send for `<context>` and `-f`: a directory (packed by the SDK), a tar file
 * (`.tar`, `.tar.gz`; sent as it is), or `-` (a tar on stdin). `-f` is a path from the
 * current directory, as with docker: inside a directory context it is sent as its path
 * there; anywhere else (or `-f -`, stdin) its text goes with the build.
 */
async function contextOf(
  arg: string,
  file: string | undefined,
): Promise<Pick<BuildParams, 'context' | 'dockerfile' | 'dockerfileText'>> {
  if (arg === '-' && file === '-') throw new CliError('the context and -f cannot both be stdin (-)');
  let context: BuildContext;
  let isDir = false;
  if (arg === '-') context = Readable.toWeb(process.stdin) as ReadableStream<Uint8Array>;
  else {
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(arg);
    } catch {
      throw new CliError(`cannot read the context ${arg}: no such directory or file`);
    }
    if (st.isDirectory()) {
      context = arg;
      isDir = true;
    } else context = await openAsBlob(arg);
  }
  if (file === undefined) return { context };
  if (file === '-') return { context, dockerfileText: await readStdin() };
  const rel = isDir ? relative(resolve(arg), resolve(file)) : '..';
  if (rel !== '' && !rel.startsWith('..') && !isAbsolute(rel)) {
    try {
      statSync(file);
    } catch {
      throw new CliError(`cannot read the Dockerfile ${file}`);
    }
    return { context, dockerfile: rel.split(sep).join('/') };
  }
  if (!isDir)
    throw new CliError('with a tar context, -f must name the Dockerfile inside the tar (-f PATH is read as one)');
  try {
    return { context, dockerfileText: readFileSync(file, 'utf8') };
  } catch {
    throw new CliError(`cannot read the Dockerfile ${file}`);
  }
}

/** The failure of a build, for stderr: step, line, instruction, exit code, and (when asked) the output's end. */
export function describeFailure(e: BuildError, withOutput: boolean): string[] {
  const out: string[] = [];
  const where = [
    e.step !== undefined ? `step ${e.step}` : '',
    e.line !== undefined ? `Dockerfile line ${e.line}` : '',
  ].filter(Boolean);
  if (where.length || e.instruction)
    out.push(`${where.join(', ')}${where.length && e.instruction ? ': ' : ''}${e.instruction ?? ''}`);
  if (e.exitCode !== undefined) out.push(`exit code ${e.exitCode}`);
  if (withOutput && e.output) {
    out.push('output (its end):');
    for (const l of e.output.replace(/\n$/, '').split('\n')) out.push(`  ${l}`);
  }
  return out;
}

/** `sbx build -t NAME[:TAG] [-f Dockerfile] [--build-arg K=V]... CONTEXT`. */
export function buildCommand(ctx: Context): Command {
  const cmd = new Command('build')
    .description(
      'build a template (the image templates/NAME:TAG) from a Dockerfile and a context; prints its log, then the image',
    )
    .argument('<context>', 'the context: a directory, a .tar or .tar.gz file, or - (a tar on stdin)')
    .requiredOption('-t, --tag <name[:tag]>', 'the template: NAME or NAME:TAG (default tag latest)')
    .option('-f, --file <path>', 'the Dockerfile (default CONTEXT/Dockerfile); - reads it from stdin')
    .option('--build-arg <k=v>', 'an ARG value (repeatable); K alone takes it from the environment', collect)
    .option('--allow-domain <domain>', 'a domain RUN steps may reach, *.example.com allowed (repeatable)', collect)
    .option('--no-cache', 'run every step, even those with a cached result')
    .option('-q, --quiet', 'no log lines: only the image (and a failure)')
    .option('--json', 'print the final build as JSON instead of the image')
    .action(async (contextArg: string, o: BuildFlags) => {
      const { name, tag } = parseTemplateRef(o.tag ?? '');
      const buildArgs = parseBuildArgs(o.buildArg ?? []);
      const allowDomains = (o.allowDomain ?? [])
        .flatMap((d) => d.split(','))
        .map((d) => d.trim())
        .filter(Boolean);
      const src = await contextOf(contextArg, o.file);
      const client = ctx.client();
      const display = new BuildDisplay(process.stderr, o.quiet === true);
      // Ctrl-C cancels the build on the server (the SDK does, when the signal aborts) and
      // exits 130; a second one leaves at once.
      const stop = new AbortController();
      let interrupts = 0;
      let id = '';
      const onSigint = () => {
        if (++interrupts > 1) process.exit(130);
        display.stop();
        if (process.stderr.isTTY)
          process.stderr.write(ctx.err.dim('cancelling the build; Ctrl-C again to leave without waiting\n'));
        stop.abort(new CliError(id ? `build ${id} cancelled` : 'build cancelled', 130));
      };
      process.on('SIGINT', onSigint);
      let b: Build;
      try {
        b = await client.images.build({
          name,
          tag,
          ...src,
          buildArgs,
          allowDomains: allowDomains.length ? allowDomains : undefined,
          noCache: o.cache === false,
          signal: stop.signal,
          onUploadProgress: (n) => display.uploaded(n),
          onStart: (s) => {
            id = s.id;
            display.started(s.id, s.image, s.steps.total);
          },
          onLog: (e: BuildLogEvent) => {
            if (e.type === 'log') display.log(e.text, e.stream, e.step);
          },
        });
      } catch (e) {
        if (e instanceof BuildError) {
          display.stop(
            e.state === 'cancelled' ? `build ${e.build.id} was cancelled` : `build ${e.build.id} failed`,
            false,
          );
          for (const l of describeFailure(e, o.quiet === true)) process.stderr.write(`  ${l}\n`);
          throw new CliError(e.message);
        }
        display.stop();
        throw e;
      } finally {
        process.off('SIGINT', onSigint);
      }
      const cached = b.steps.cached;
      display.stop(
        `built ${b.image} in ${display.elapsed()} (${b.steps.total} step${b.steps.total === 1 ? '' : 's'}${cached ? `, ${cached} cached` : ''}${b.sizeBytes !== undefined ? `, ${formatBytes(b.sizeBytes)}` : ''})`,
      );
      if (o.json) printJson(b);
      else process.stdout.write(`${b.image}\n`);
    });
  return withExamples(
    cmd,
    'sbx build -t web:v1 .',
    'sbx build -t tools -f docker/Dockerfile.tools --build-arg VERSION=1.2 --allow-domain pypi.org .',
    'sbx create --image "$(sbx build -q -t web .)"',
  );
}
