import { Command } from 'commander';
import { Sandbox } from '@sandboxd/sdk';
import { withExamples, type Context } from '../context.js';
import { CliError, printJson, relative, table } from '../ui.js';

/** `sbx ls`: the account's sandboxes as a table, newest first. */
export function lsCommand(ctx: Context): Command {
  const cmd = new Command('ls')
    .alias('list')
    .description('list sandboxes, newest first')
    .option('--state <state>', 'only started or stopped sandboxes')
    .option('--json', 'print the sandboxes as JSON')
    .action(async (o: { state?: string; json?: boolean }) => {
      if (o.state !== undefined && o.state !== 'started' && o.state !== 'stopped')
        throw new CliError('--state must be started or stopped');
      const list = await Sandbox.list({ state: o.state as 'started' | 'stopped' | undefined }, ctx.client());
      if (o.json) return printJson(list.map((s) => s.info));
      if (list.length === 0) return void process.stdout.write('No sandboxes.\n');
      const p = ctx.out;
      const paint = (s: string) => (s === 'started' ? p.green(s) : s === 'error' ? p.red(s) : p.dim(s));
      const rows = list.map((s) => [
        s.id,
        s.name,
        paint(s.state),
        s.image,
        relative(s.info.createdAt),
        s.state === 'started' ? relative(s.info.stopAt) : '-',
      ]);
      process.stdout.write(table(['ID', 'NAME', 'STATE', 'IMAGE', 'CREATED', 'STOPS'], rows, p));
    });
  return withExamples(cmd, 'sbx ls', 'sbx ls --state started --json');
}
