/**
 * `sbx pause|resume|stop|start ID`: the sandbox lifecycle. Each prints one line with the new
 * state and its deadline, or the sandbox as JSON with `--json`.
 */
import { Command } from 'commander';
import { Sandbox } from '@sandboxd/sdk';
import { withExamples, type Context } from '../context.js';
import { parseDuration, printJson, relative } from '../ui.js';

type Action = 'pause' | 'resume' | 'stop' | 'start';

/** The line printed after an action: the new state and what happens next, and when. */
export function describeState(sb: Sandbox): string {
  const at = (iso: string) => `${iso} (${relative(iso)})`;
  switch (sb.state) {
    case 'started':
      return `${sb.id} started; ${sb.onTimeout === 'pause' ? 'pauses' : 'stops'} at ${at(sb.info.stopAt)}`;
    case 'paused':
      return `${sb.id} paused${sb.info.expiresAt ? `; deleted unless resumed by ${at(sb.info.expiresAt)}` : ''}`;
    case 'stopped':
      return `${sb.id} stopped; root layer kept${sb.info.expiresAt ? ` until ${at(sb.info.expiresAt)}` : ''}`;
    default:
      return `${sb.id} ${sb.state}`;
  }
}

function lifecycleCommand(ctx: Context, action: Action, description: string, examples: string[]): Command {
  const cmd = new Command(action).description(description).argument('<id>', 'sandbox id');
  const timed = action === 'resume' || action === 'start';
  if (timed) cmd.option('-t, --timeout <duration>', 'new lifetime from now: ms, or with s/m/h (default 10m)');
  cmd
    .option('--json', 'print the sandbox as JSON')
    .action(async (id: string, o: { timeout?: string; json?: boolean }) => {
      const timeoutMs = o.timeout === undefined ? undefined : parseDuration(o.timeout, '--timeout');
      const sb = await Sandbox.get(id, ctx.client());
      if (action === 'pause') await sb.pause();
      else if (action === 'stop') await sb.stop();
      else await sb[action](timeoutMs === undefined ? {} : { timeoutMs });
      if (o.json) return printJson(sb.info);
      process.stdout.write(`${describeState(sb)}\n`);
    });
  return withExamples(cmd, ...examples);
}

/** The four lifecycle verbs. */
export function lifecycleCommands(ctx: Context): Command[] {
  return [
    lifecycleCommand(
      ctx,
      'pause',
      'freeze a started sandbox: processes and memory are kept, nothing runs (resume goes on where it was)',
      ['sbx pause sbx_abc...'],
    ),
    lifecycleCommand(ctx, 'resume', 'thaw a paused sandbox with a new lifetime', [
      'sbx resume sbx_abc...',
      'sbx resume --timeout 1h sbx_abc...',
    ]),
    lifecycleCommand(
      ctx,
      'stop',
      'stop a started or paused sandbox: processes end, its files are kept for `sbx start` (`sbx rm` deletes)',
      ['sbx stop sbx_abc...'],
    ),
    lifecycleCommand(ctx, 'start', 'boot a stopped sandbox again from its kept files, with a new lifetime', [
      'sbx start sbx_abc...',
      'sbx start -t 30m sbx_abc...',
    ]),
  ];
}
