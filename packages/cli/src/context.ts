/**
 * What every verb's action gets: the global options, a lazily built SDK client and the
 * palettes of stdout and stderr.
 */
import type { Command } from 'commander';
import type { SandboxdClient } from '@sandboxd/sdk';
import { makeClient, type GlobalOptions } from './config.js';
import { palette, type Palette } from './ui.js';

export interface Context {
  /** Global options (`--api-url`). */
  globals(): GlobalOptions;
  /** The SDK client; throws CliError when not logged in. */
  client(): SandboxdClient;
  out: Palette;
  err: Palette;
}

/** The context of `program`. */
export function createContext(program: Command): Context {
  let client: SandboxdClient | undefined;
  const globals = () => program.opts<GlobalOptions>();
  return {
    globals,
    client: () => (client ??= makeClient(globals())),
    out: palette(process.stdout),
    err: palette(process.stderr),
  };
}

/** Appends an `Example:` section to a verb's `--help`. */
export function withExamples(cmd: Command, ...lines: string[]): Command {
  return cmd.addHelpText(
    'after',
    `\nExample${lines.length > 1 ? 's' : ''}:\n${lines.map((l) => `  $ ${l}`).join('\n')}\n`,
  );
}
