/**
 * `sbx fork ID [-n N]`: N new sandboxes from a started gVisor sandbox, its processes, memory
 * and files included. Prints one line per fork (its id and name), only the ids with `-q`, or
 * the sandboxes as JSON with `--json`.
 */
import { Command } from 'commander';
import { Sandbox } from '@sandboxd/sdk';
import { withExamples, type Context } from '../context.js';
import { CliError, printJson } from '../ui.js';

/** `sbx fork`. */
export function forkCommand(ctx: Context): Command {
  const cmd = new Command('fork')
    .description(
      'copy a started gVisor sandbox, running processes and memory included, into N new sandboxes (each with its own address and files)',
    )
    .argument('<id>', 'sandbox id')
    .option('-n, --count <n>', 'how many (1 to 10)', '1')
    .option('-q, --quiet', 'print only the ids')
    .option('--json', 'print the new sandboxes as JSON')
    .action(async (id: string, o: { count: string; quiet?: boolean; json?: boolean }) => {
      const count = Number(o.count);
      if (!/^\d+$/.test(o.count) || count < 1 || count > 10)
        throw new CliError(`--count must be a whole number from 1 to 10 (got "${o.count}")`);
      const sb = await Sandbox.get(id, ctx.client());
      const forks = await sb.fork({ count });
      if (o.json) return printJson(forks.map((f) => f.info));
      if (o.quiet) return void process.stdout.write(forks.map((f) => `${f.id}\n`).join(''));
      process.stdout.write(forks.map((f) => `Forked ${ctx.out.bold(f.id)} (${f.name}) from ${sb.id}\n`).join(''));
    });
  return withExamples(cmd, 'sbx fork sbx_abc...', 'sbx fork -n 3 -q sbx_abc...');
}
