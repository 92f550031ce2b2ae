/**
 * `sbx pause|resume|stop|start ID`: the sandbox lifecycle. Each prints one line with the new
 * state and its deadline, or the sandbox as JSON with `--json`.
 */
import { Command, Option } from 'commander';
import { Sandbox } from '@sandboxd/sdk';
import { withExamples, type Context } from '../context.js';
import { CliError, parseDuration, printJson, relative } from '../ui.js';

type Action = 'pause' | 'resume' | 'stop' | 'start';

/** The line printed after an action: the new state and what happens next, and when. */
export function describeState(sb: Sandbox): string {
  const at = (iso: string) => `${iso} (${relative(iso)})`;
  switch (sb.state) {
    case 'started':
      return `${sb.id} started; ${sb.onTimeout === 'pause' ? 'pauses' : 'stops'} at ${at(sb.info.stopAt)}`;
    case 'paused':
      return `${sb.id} paused${sb.pausedMemory === 'disk' ? ' to disk' : ''}${sb.info.expiresAt ? `; deleted unless resumed by ${at(sb.info.expiresAt)}` : ''}`;
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
  if (action === 'pause') {
    cmd.addOption(
      new Option('--memory <where>', 'where its memory is kept: ram (default), or disk (gVisor sandboxes)').choices([
        'ram',
        'disk',
      ]),
    );
    cmd.option('--to-disk', 'the same as --memory disk');
  }
  cmd
    .option('--json', 'print the sandbox as JSON')
    .action(async (id: string, o: { timeout?: string; json?: boolean; memory?: 'ram' | 'disk'; toDisk?: boolean }) => {
      const timeoutMs = o.timeout === undefined ? undefined : parseDuration(o.timeout, '--timeout');
      if (o.toDisk && o.memory === 'ram') throw new CliError('--to-disk and --memory ram contradict each other');
      const memory = o.toDisk ? 'disk' : o.memory;
      const sb = await Sandbox.get(id, ctx.client());
      if (action === 'pause') await sb.pause(memory ? { memory } : {});
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
      'freeze a started sandbox: processes and memory are kept, nothing runs (resume goes on where it was); --to-disk checkpoints a gVisor sandbox to disk',
      ['sbx pause sbx_abc...', 'sbx pause --to-disk sbx_abc...'],
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
