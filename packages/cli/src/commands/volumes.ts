import { Command } from 'commander';
import { withExamples, type Context } from '../context.js';
import { printJson, relative, table } from '../ui.js';

/** `sbx volumes ls|rm`: the account's named volumes. */
export function volumesCommand(ctx: Context): Command {
  const volumes = new Command('volumes').description('manage named volumes');
  volumes.addCommand(
    withExamples(
      new Command('ls')
        .alias('list')
        .description('list volumes')
        .option('--json', 'print the volumes as JSON')
        .action(async (o: { json?: boolean }) => {
          const list = await ctx.client().volumes.list();
          if (o.json) return printJson(list);
          if (list.length === 0) return void process.stdout.write('No volumes.\n');
          const rows = list.map((v) => [
            v.name,
            `${v.sizeGb} GiB`,
            v.mountedBy.join(',') || '-',
            relative(v.createdAt),
          ]);
          process.stdout.write(table(['NAME', 'SIZE', 'MOUNTED BY', 'CREATED'], rows, ctx.out));
        }),
      'sbx volumes ls',
    ),
  );
  volumes.addCommand(
    withExamples(
      new Command('rm')
        .description('delete a volume and its data (refused while a running sandbox mounts it)')
        .argument('<name>', 'volume name')
        .action(async (name: string) => {
          await ctx.client().volumes.delete(name);
          process.stdout.write(`Deleted volume ${name}\n`);
        }),
      'sbx volumes rm data',
    ),
  );
  return volumes;
}
