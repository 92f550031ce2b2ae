/**
 * `sandboxd <command>`: the operator's commands. `serve` (the default) runs the server of
 * `SANDBOXD_ROLE`; each other command lives in a file of its own here and is listed in
 * {@link COMMANDS}. A command gets its arguments (after its name) and returns an exit status;
 * it writes its own output, and a {@link UsageError} it throws is printed with the usage.
 */
import { RELEASE } from '../release.js';
import { type Command, UsageError } from './command.js';

export type { Command } from './command.js';
export { UsageError } from './command.js';

function version(): string {
  return RELEASE;
}

/** Every command but `help` and `version`. Keep in alphabetical order. */
export const COMMANDS: Record<string, () => Promise<Command>> = {
  backup: async () => (await import('./backup.js')).backup,
  install: async () => (await import('./install.js')).installCommand,
  restore: async () => (await import('./restore.js')).restore,
  'secrets-key': async () => (await import('./secrets-key.js')).secretsKey,
  serve: async () => (await import('./serve.js')).serve,
};

async function help(): Promise<string> {
  const lines: string[] = [];
  for (const [name, load] of Object.entries(COMMANDS)) lines.push(`  ${name.padEnd(16)} ${(await load()).summary}`);
  return [
    `sandboxd ${version()}: a self-hosted sandbox service`,
    '',
    'usage: sandboxd [command] [arguments]',
    '',
    'commands:',
    ...lines,
    "  help [command]   this text, or a command's usage",
    '  version          print the version',
    '',
    'With no command, sandboxd serves (the same as `sandboxd serve`). Settings come from',
    'SANDBOXD_* variables and the JSON file SANDBOXD_CONFIG names (docs/production.md).',
    '',
  ].join('\n');
}

export async function run(argv: string[]): Promise<number> {
  const [name = 'serve', ...rest] = argv;
  if (name === 'version' || name === '--version' || name === '-v') {
    process.stdout.write(`${version()}\n`);
    return 0;
  }
  if (name === 'help' || name === '--help' || name === '-h') {
    const which = rest[0];
    if (which && COMMANDS[which]) {
      const cmd = await COMMANDS[which]();
      process.stdout.write(`${cmd.summary}\n\n${cmd.usage}\n`);
      return 0;
    }
    process.stdout.write(await help());
    return which ? 2 : 0;
  }
  const load = COMMANDS[name];
  if (!load) {
    process.stderr.write(`sandboxd: unknown command "${name}"\n\n${await help()}`);
    return 2;
  }
  const cmd = await load();
  try {
    return await cmd.run(rest);
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`sandboxd ${name}: ${e.message}\n\n${cmd.usage}\n`);
      return 2;
    }
    throw e;
  }
}
