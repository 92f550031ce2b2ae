/**
 * `sbx builds [ls|logs|cancel|rm]` and `sbx templates [ls|rm]`: the account's builds and
 * templates (the noun/verb style of `sbx snapshots`). `sbx build` starts builds (build.ts).
 */
import { Command } from 'commander';
import type { Build } from '@sandboxd/sdk';
import { withExamples, type Context } from '../context.js';
import { CliError, formatBytes, printJson, relative as ago, table } from '../ui.js';
import { parseTemplateRef } from './build.js';

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
