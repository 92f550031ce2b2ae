import { Command } from 'commander';
import { withExamples, type Context } from '../context.js';
import { printJson, relative, table } from '../ui.js';

/** `sbx keys create|ls|revoke`: the account's API keys. */
export function keysCommand(ctx: Context): Command {
  const keys = new Command('keys').description('manage API keys');
  keys.addCommand(
    withExamples(
      new Command('create')
        .description('create an API key; it is shown this once')
        .argument('<name>', 'a name to recognise it by')
        .option('--json', 'print the key and its id as JSON')
        .action(async (name: string, o: { json?: boolean }) => {
          const k = await ctx.client().keys.create(name);
          if (o.json) return printJson(k);
          process.stdout.write(`${k.key}\n`);
          process.stderr.write(
            ctx.err.dim(`Created key ${k.id} (${k.name}). It is shown only now: store it safely.\n`),
          );
        }),
      'sbx keys create ci',
    ),
  );
  keys.addCommand(
    withExamples(
      new Command('ls')
        .alias('list')
        .description('list API keys (never the keys themselves)')
        .option('--json', 'print the keys as JSON')
        .action(async (o: { json?: boolean }) => {
          const list = await ctx.client().keys.list();
          if (o.json) return printJson(list);
          if (list.length === 0) return void process.stdout.write('No API keys.\n');
          const rows = list.map((k) => [
            k.id,
            k.name,
            `${k.prefix}...`,
            relative(k.createdAt),
            k.lastUsedAt ? relative(k.lastUsedAt) : 'never',
          ]);
          process.stdout.write(table(['ID', 'NAME', 'PREFIX', 'CREATED', 'LAST USED'], rows, ctx.out));
        }),
      'sbx keys ls',
    ),
  );
  keys.addCommand(
    withExamples(
      new Command('revoke')
        .description('revoke an API key at once')
        .argument('<id>', 'key id (see sbx keys ls)')
        .action(async (id: string) => {
          await ctx.client().keys.revoke(id);
          process.stdout.write(`Revoked key ${id}\n`);
        }),
      'sbx keys revoke key_abc...',
    ),
  );
  return keys;
}
