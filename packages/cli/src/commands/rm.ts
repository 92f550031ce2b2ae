import { Command } from 'commander';
import { Sandbox } from '@sandboxd/sdk';
import { withExamples, type Context } from '../context.js';
import { CliError } from '../ui.js';

/** `sbx rm ID...`: deletes sandboxes; reports each failure and exits 1 if any failed. */
export function rmCommand(ctx: Context): Command {
  const cmd = new Command('rm')
    .description('kill sandboxes and remove their records (named volumes are kept)')
    .argument('<ids...>', 'sandbox ids')
    .action(async (ids: string[]) => {
      const client = ctx.client();
      let failed = 0;
      for (const id of ids) {
        try {
          await Sandbox.delete(id, client);
          process.stdout.write(`Deleted ${id}\n`);
        } catch (e) {
          failed++;
          process.stderr.write(`error: ${id}: ${(e as Error).message}\n`);
        }
      }
      if (failed) throw new CliError(`${failed} of ${ids.length} sandbox(es) not deleted`);
    });
  return withExamples(cmd, 'sbx rm sbx_abc...', 'sbx rm $(sbx ls --json | jq -r ".[].id")');
}
