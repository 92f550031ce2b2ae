/**
 * `sbx snapshot ID NAME` takes a snapshot; `sbx snapshots [ls]` and `sbx snapshots rm NAME...`
 * manage them (the noun/verb style of `sbx volumes`).
 */
import { Command } from 'commander';
import { withExamples, type Context } from '../context.js';
import { CliError, formatBytes, printJson, relative, table } from '../ui.js';

/** `sbx snapshot ID NAME`: saves the sandbox's files as the image `snapshots/NAME`. */
export function snapshotCommand(ctx: Context): Command {
  const cmd = new Command('snapshot')
    .description("save a sandbox's files as the image snapshots/NAME (create sandboxes from it with --image)")
    .argument('<id>', 'sandbox id')
    .argument('<name>', 'snapshot name: a-z, 0-9, _ . - (up to 63, starting with a letter or digit)')
    .option('--json', 'print the snapshot as JSON')
    .action(async (id: string, name: string, o: { json?: boolean }) => {
      const s = await ctx.client().snapshots.create(id, name);
      if (o.json) return printJson(s);
      process.stdout.write(
        `Snapshot ${ctx.out.bold(s.name)} of ${s.sandboxId} (${formatBytes(s.sizeBytes)} over ${s.baseImage})\n` +
          `  image  ${s.image}\n`,
      );
    });
  return withExamples(cmd, 'sbx snapshot sbx_abc... with-deps', 'sbx create --image snapshots/with-deps');
}

/** `sbx snapshots ls|rm`: the account's snapshots; `ls` is the default. */
export function snapshotsCommand(ctx: Context): Command {
  const snapshots = new Command('snapshots').description(
    'list and delete snapshots (sbx snapshots = sbx snapshots ls)',
  );
  snapshots.addCommand(
    withExamples(
      new Command('ls')
        .alias('list')
        .description('list snapshots, newest first')
        .option('--json', 'print the snapshots as JSON')
        .action(async (o: { json?: boolean }) => {
          const list = await ctx.client().snapshots.list();
          if (o.json) return printJson(list);
          if (list.length === 0) return void process.stdout.write('No snapshots.\n');
          const rows = list.map((s) => [
            s.name,
            s.image,
            formatBytes(s.sizeBytes),
            s.baseImage,
            s.sandboxId,
            relative(s.createdAt),
          ]);
          process.stdout.write(table(['NAME', 'IMAGE', 'SIZE', 'BASE IMAGE', 'FROM', 'CREATED'], rows, ctx.out));
        }),
      'sbx snapshots',
      'sbx snapshots ls --json',
    ),
    { isDefault: true },
  );
  snapshots.addCommand(
    withExamples(
      new Command('rm')
        .description('delete snapshots (sandboxes created from them are not affected)')
        .argument('<names...>', 'snapshot names')
        .action(async (names: string[]) => {
          const client = ctx.client();
          let failed = 0;
          for (const name of names) {
            try {
              await client.snapshots.delete(name);
              process.stdout.write(`Deleted snapshot ${name}\n`);
            } catch (e) {
              failed++;
              process.stderr.write(`error: ${name}: ${(e as Error).message}\n`);
            }
          }
          if (failed) throw new CliError(`${failed} of ${names.length} snapshot(s) not deleted`);
        }),
      'sbx snapshots rm with-deps',
    ),
  );
  return snapshots;
}
