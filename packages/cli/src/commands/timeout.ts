import { Command } from 'commander';
import { Sandbox } from '@sandboxd/sdk';
import { withExamples, type Context } from '../context.js';
import { parseDuration, relative } from '../ui.js';

/** `sbx timeout ID MS`: sets the sandbox to stop MS from now. */
export function timeoutCommand(ctx: Context): Command {
  const cmd = new Command('timeout')
    .description('set a sandbox to stop the given time from now (0 stops it now)')
    .argument('<id>', 'sandbox id')
    .argument('<duration>', 'ms, or a number with s, m or h')
    .action(async (id: string, duration: string) => {
      const ms = parseDuration(duration, 'duration');
      const sb = await Sandbox.get(id, ctx.client());
      const stopAt = (await sb.setTimeout(ms)).toISOString();
      process.stdout.write(`${sb.id} stops at ${stopAt} (${relative(stopAt)})\n`);
    });
  return withExamples(cmd, 'sbx timeout sbx_abc... 600000', 'sbx timeout sbx_abc... 1h');
}
