/**
 * `sbx`, the sandboxd command line. One file per verb under commands/; every verb talks
 * to the server through `@sandboxd/sdk`. Errors print as one line, `error: <message>`,
 * with a non-zero exit code.
 */
import { Command, CommanderError } from 'commander';
import { SandboxdApiError } from '@sandboxd/sdk';
import { createContext } from './context.js';
import { buildCommand } from './commands/build.js';
import { buildsCommand, templatesCommand } from './commands/builds.js';
import { cpCommand } from './commands/cp.js';
import { createCommand } from './commands/create.js';
import { networkCommand } from './commands/network.js';
import { execCommand } from './commands/exec.js';
import { imagesCommand } from './commands/images.js';
import { keysCommand } from './commands/keys.js';
import { lifecycleCommands } from './commands/lifecycle.js';
import { forkCommand } from './commands/fork.js';
import { loginCommand } from './commands/login.js';
import { lsCommand } from './commands/ls.js';
import { mcpCommand } from './commands/mcp.js';
import { rmCommand } from './commands/rm.js';
import { runCommand } from './commands/run.js';
import { secretCommand } from './commands/secret.js';
import { shellCommand } from './commands/shell.js';
import { snapshotCommand, snapshotsCommand } from './commands/snapshots.js';
import { timeoutCommand } from './commands/timeout.js';
import { volumesCommand } from './commands/volumes.js';
import { endQuietlyOnClosedPipe, readerGone } from './pipe.js';
import { CliError } from './ui.js';

const VERSION = '0.3.0';

/** One readable line for any error; API errors add the image or the sandbox state they are about. */
export function errorMessage(e: unknown): string {
  if (e instanceof SandboxdApiError) {
    const d = e.details as { image?: unknown; state?: unknown } | undefined;
    const image =
      d && typeof d === 'object' && typeof d.image === 'string' && !e.message.includes(d.image) ? `: ${d.image}` : '';
    // A 409 of the lifecycle names the sandbox's current state in details.state.
    const state =
      d && typeof d === 'object' && typeof d.state === 'string' && !e.message.includes(d.state)
        ? ` (the sandbox is ${d.state})`
        : '';
    return `${e.message}${image}${state}`.replace(/\s*\n\s*/g, ' ');
  }
  if (e instanceof Error) return e.message.replace(/\s*\n\s*/g, ' ');
  return String(e);
}

/** The program with every verb, each with `--help` and an example. */
export function buildProgram(): Command {
  const program = new Command('sbx')
    .description('sandboxd from the command line: create sandboxes, run commands, copy files, open shells')
    .version(VERSION)
    .option('--api-url <url>', 'server address (default: SANDBOX_API_URL, the stored login, http://localhost:8080)')
    .option('--no-color', 'no colour (also: NO_COLOR=1)')
    .enablePositionalOptions()
    .showSuggestionAfterError()
    .addHelpText(
      'after',
      '\nThe API key comes from SANDBOX_API_KEY or `sbx login`.\n\nExample:\n  $ sbx create -q | xargs -I{} sbx exec {} -- echo hello\n',
    );
  const ctx = createContext(program);
  for (const cmd of [
    loginCommand(ctx),
    createCommand(ctx),
    lsCommand(ctx),
    execCommand(ctx),
    runCommand(ctx),
    cpCommand(ctx),
    shellCommand(ctx),
    timeoutCommand(ctx),
    networkCommand(ctx),
    ...lifecycleCommands(ctx),
    forkCommand(ctx),
    snapshotCommand(ctx),
    rmCommand(ctx),
    buildCommand(ctx),
    buildsCommand(ctx),
    templatesCommand(ctx),
    imagesCommand(ctx),
    snapshotsCommand(ctx),
    volumesCommand(ctx),
    keysCommand(ctx),
    secretCommand(ctx),
    mcpCommand(ctx),
  ])
    program.addCommand(cmd);
  const setup = (c: Command) => {
    c.exitOverride();
    c.configureOutput({ outputError: (text, write) => write(text.startsWith('error:') ? text : `error: ${text}`) });
    c.commands.forEach(setup);
  };
  setup(program);
  return program;
}

/**
 * Runs `sbx` with `argv` (as in process.argv) and sets the exit code. A closed pipe on
 * stdout or stderr (`sbx ls | head -1`) ends it quietly with 141, as `ls` (pipe.ts).
 */
export async function main(argv: string[]): Promise<void> {
  endQuietlyOnClosedPipe();
  try {
    await buildProgram().parseAsync(argv);
  } catch (e) {
    if (e instanceof CommanderError) {
      // Commander has printed help, the version or its own error line already.
      process.exitCode = e.exitCode;
      return;
    }
    if (readerGone()) return; // leaving with 141: the failure is only the closed pipe's echo
    process.stderr.write(`error: ${errorMessage(e)}\n`);
    process.exitCode = e instanceof CliError ? e.exitCode : 1;
  }
}
