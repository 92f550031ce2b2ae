/**
 * `sbx build` builds a template from a Dockerfile and a context directory (logs as they
 * come, a progress line on a TTY); `sbx builds [ls|logs|cancel|rm]` and
 * `sbx templates [ls|rm]` manage builds and templates (the noun/verb style of `sbx
 * snapshots`).
 */
import { openAsBlob, readFileSync, statSync } from 'node:fs';
import { isAbsolute, relative, resolve, sep } from 'node:path';
import { Readable } from 'node:stream';
import { Command } from 'commander';
import { BuildError, type Build, type BuildContext, type BuildLogEvent, type BuildParams } from '@sandboxd/sdk';
import { withExamples, type Context } from '../context.js';
import { BuildDisplay } from '../progress.js';
import { CliError, collect, formatBytes, printJson, relative as ago, table } from '../ui.js';

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

/** Seconds between two ISO times, as `42s` / `3m`, or `-`. */
function took(b: Build): string {
  if (!b.startedAt) return '-';
  const end = b.finishedAt ? Date.parse(b.finishedAt) : Date.now();
  const s = Math.max(0, Math.round((end - Date.parse(b.startedAt)) / 1000));
  return s < 90 ? `${s}s` : `${Math.round(s / 60)}m`;
}

/** `sbx builds ls|logs|cancel|rm`: the account's builds; `ls` is the default. */
export function buildsCommand(ctx: Context): Command {
  const builds = new Command('builds').description(
    'list builds, show their logs, cancel and delete them (sbx builds = sbx builds ls)',
  );
  builds.addCommand(
    withExamples(
      new Command('ls')
        .alias('list')
        .description('list builds, newest first')
        .option('--name <name>', 'only the builds of this template')
        .option('--json', 'print the builds as JSON')
        .action(async (o: { name?: string; json?: boolean }) => {
          const list = await ctx.client().builds.list({ name: o.name });
          if (o.json) return printJson(list);
          if (list.length === 0) return void process.stdout.write('No builds.\n');
          const state = (b: Build) =>
            b.state === 'ready'
              ? ctx.out.green(b.state)
              : b.state === 'error'
                ? ctx.out.red(b.state)
                : b.state === 'cancelled'
                  ? ctx.out.yellow(b.state)
                  : ctx.out.cyan(b.state);
          const rows = list.map((b) => [
            b.id,
            b.image,
            state(b),
            `${b.steps.done}/${b.steps.total}${b.steps.cached ? ` (${b.steps.cached} cached)` : ''}`,
            ago(b.createdAt),
            took(b),
          ]);
          process.stdout.write(table(['ID', 'IMAGE', 'STATE', 'STEPS', 'CREATED', 'TOOK'], rows, ctx.out));
        }),
      'sbx builds',
      'sbx builds ls --name web --json',
    ),
    { isDefault: true },
  );
  builds.addCommand(
    withExamples(
      new Command('logs')
        .description("print a build's log; -f follows it until the build ends (exit code 1 unless it ends ready)")
        .argument('<id>', 'build id (bld_...)')
        .option('-f, --follow', 'keep printing new lines until the build ends')
        .option('--json', 'print the NDJSON events as they come')
        .action(async (id: string, o: { follow?: boolean; json?: boolean }) => {
          const stop = new AbortController();
          const onSigint = () => stop.abort(new CliError('interrupted', 130));
          process.on('SIGINT', onSigint);
          try {
            for await (const e of ctx.client().builds.logs(id, { follow: o.follow === true, signal: stop.signal })) {
              if (o.json) process.stdout.write(`${JSON.stringify(e)}\n`);
              else if (e.type === 'log') process.stdout.write(`${e.text.replace(/\r?\n$/, '')}\n`);
              if (e.type === 'end') {
                if (!o.json) {
                  const ok = e.state === 'ready';
                  process.stderr.write(`${ok ? ctx.err.green('✔') : ctx.err.red('✖')} build ${id} ${e.state}\n`);
                  if (e.error) process.stderr.write(`  ${e.error.message}\n`);
                }
                if (e.state !== 'ready') process.exitCode = 1;
              }
            }
          } finally {
            process.off('SIGINT', onSigint);
          }
        }),
      'sbx builds logs bld_... -f',
    ),
  );
  const each = (verb: string, what: string, act: (id: string) => Promise<string>) =>
    new Command(verb)
      .description(what)
      .argument('<ids...>', 'build ids (bld_...)')
      .action(async (ids: string[]) => {
        let failed = 0;
        for (const id of ids) {
          try {
            process.stdout.write(`${await act(id)}\n`);
          } catch (e) {
            failed++;
            process.stderr.write(`error: ${id}: ${(e as Error).message}\n`);
          }
        }
        if (failed)
          throw new CliError(`${failed} of ${ids.length} build(s) not ${verb === 'rm' ? 'deleted' : 'cancelled'}`);
      });
  builds.addCommand(
    withExamples(
      each('cancel', 'cancel queued or running builds (their sandboxes are deleted)', async (id) => {
        const b = await ctx.client().builds.cancel(id);
        return `Cancelled build ${b.id} (${b.image})`;
      }),
      'sbx builds cancel bld_...',
    ),
  );
  builds.addCommand(
    withExamples(
      each('rm', 'delete builds and their logs (a running one is cancelled first; templates stay)', async (id) => {
        await ctx.client().builds.delete(id);
        return `Deleted build ${id}`;
      }),
      'sbx builds rm bld_...',
    ),
  );
  return builds;
}

/** `sbx templates ls|rm`: the account's templates; `ls` is the default. */
export function templatesCommand(ctx: Context): Command {
  const templates = new Command('templates').description(
    'list and delete templates, the images builds make (sbx templates = sbx templates ls)',
  );
  templates.addCommand(
    withExamples(
      new Command('ls')
        .alias('list')
        .description('list templates')
        .option('--json', 'print the templates as JSON')
        .action(async (o: { json?: boolean }) => {
          const list = await ctx.client().templates.list();
          if (o.json) return printJson(list);
          if (list.length === 0) return void process.stdout.write('No templates.\n');
          const rows = list.map((t) => [t.image, formatBytes(t.sizeBytes), t.buildId, ago(t.createdAt)]);
          process.stdout.write(table(['IMAGE', 'SIZE', 'BUILD', 'CREATED'], rows, ctx.out));
        }),
      'sbx templates',
      'sbx templates ls --json',
    ),
    { isDefault: true },
  );
  templates.addCommand(
    withExamples(
      new Command('rm')
        .description('delete templates: NAME:TAG one tag, NAME every tag (sandboxes made from them keep their files)')
        .argument('<refs...>', 'NAME or NAME:TAG')
        .action(async (refs: string[]) => {
          const parsed = refs.map((r) => ({ ref: r, ...parseTemplateRef(r, 'a template') }));
          const client = ctx.client();
          let failed = 0;
          for (const { ref, name, tag } of parsed) {
            try {
              await client.templates.delete(name, tag);
              process.stdout.write(
                `Deleted template ${tag === undefined ? `${name} (every tag)` : `${name}:${tag}`}\n`,
              );
            } catch (e) {
              failed++;
              process.stderr.write(`error: ${ref}: ${(e as Error).message}\n`);
            }
          }
          if (failed) throw new CliError(`${failed} of ${refs.length} template(s) not deleted`);
        }),
      'sbx templates rm web:v1',
      'sbx templates rm web',
    ),
  );
  return templates;
}
