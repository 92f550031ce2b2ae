import { Command } from 'commander';
import { ConnectionError, Sandbox, type Terminal, type TerminalCreateParams } from '@sandboxd/sdk';
import { withExamples, type Context } from '../context.js';
import { CliError } from '../ui.js';

/**
 * Joins the local terminal to a remote one: raw mode, keystrokes out, output in, resize on
 * SIGWINCH. Resolves with the shell's exit code. Without a TTY, stdin is forwarded as is
 * and its end sends Ctrl-D.
 */
export async function attach(term: Terminal): Promise<number> {
  const { stdin, stdout } = process;
  const raw = Boolean(stdin.isTTY);
  const onInput = (b: Buffer) => {
    try {
      term.write(b);
    } catch {
      /* connection gone: wait() reports it */
    }
  };
  const onEnd = () => onInput(Buffer.from('\x04'));
  const onResize = () => {
    try {
      term.resize(stdout.columns || 80, stdout.rows || 24);
    } catch {
      /* connection gone */
    }
  };
  const offData = term.onData((chunk) => stdout.write(chunk));
  if (raw) stdin.setRawMode(true);
  stdin.on('data', onInput);
  if (!raw) stdin.on('end', onEnd);
  stdin.resume();
  process.on('SIGWINCH', onResize);
  try {
    const exit = await term.wait();
    return exit.exitCode;
  } finally {
    process.off('SIGWINCH', onResize);
    stdin.off('data', onInput);
    stdin.off('end', onEnd);
    if (raw) stdin.setRawMode(false);
    stdin.pause();
    offData();
  }
}

/** `sbx shell ID`: an interactive terminal in the sandbox; exits with the shell's exit code. */
export function shellCommand(ctx: Context): Command {
  const cmd = new Command('shell')
    .description("open an interactive shell in a sandbox; exits with the shell's exit code")
    .argument('<id>', 'sandbox id')
    .option('-s, --shell <shell>', 'bash, zsh, fish or sh (default: bash if present, else sh)')
    .option('--cwd <dir>', 'working directory')
    .action(async (id: string, o: { shell?: string; cwd?: string }) => {
      const sb = await Sandbox.get(id, ctx.client());
      const params: TerminalCreateParams = { cols: process.stdout.columns || 80, rows: process.stdout.rows || 24 };
      if (o.shell) params.shell = o.shell as TerminalCreateParams['shell'];
      if (o.cwd) params.cwd = o.cwd;
      const term = await sb.terminals.create(params);
      let code: number;
      try {
        code = await attach(term);
      } catch (e) {
        if (e instanceof ConnectionError) throw new CliError(`connection to the terminal was lost (${e.message})`);
        throw e;
      } finally {
        await term.close().catch(() => {});
      }
      process.exitCode = code;
    });
  return withExamples(cmd, 'sbx shell sbx_abc...', 'sbx shell --shell sh --cwd /tmp sbx_abc...');
}
