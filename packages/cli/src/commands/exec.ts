import { Command } from 'commander';
import { Sandbox, type ExecCallOptions } from '@sandboxd/sdk';
import { withExamples, type Context } from '../context.js';
import { CliError, collect, parseDuration, parseEnv } from '../ui.js';

/** Quotes one argument for `/bin/sh` unless it is plainly safe. */
export function shellQuote(arg: string): string {
  return /^[A-Za-z0-9_/.,:=@%+-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`;
}

/**
 * The command line for `sh -c`: a single argument is taken as shell text (pipes, `$VARS`),
 * several are quoted one by one so each reaches the program as given.
 */
export function commandLine(args: string[]): string {
  return args.length === 1 ? args[0] : args.map(shellQuote).join(' ');
}

/** `sbx exec ID -- cmd...`: runs a command, prints its output, exits with its exit code. */
export function execCommand(ctx: Context): Command {
  const cmd = new Command('exec')
    .description("run a command in a sandbox; prints its output and exits with the command's exit code")
    .argument('<id>', 'sandbox id')
    .argument(
      '<command...>',
      'the command: everything after the id (options go before it); one argument is shell text, several are quoted one by one',
    )
    .option('--cwd <dir>', 'working directory')
    .option('-e, --env <KEY=VALUE>', 'extra environment variable (repeatable)', collect)
    .option('-t, --timeout <duration>', 'kill the command after this long (default 60s; exit code 124)')
    .option('-b, --background', 'start it in the background and print its pid')
    // As with `docker exec`, options go before the id; everything after it is the command.
    .passThroughOptions()
    .action(
      async (
        id: string,
        args: string[],
        o: { cwd?: string; env?: string[]; timeout?: string; background?: boolean },
      ) => {
        const command = commandLine(args[0] === '--' ? args.slice(1) : args);
        if (command.trim() === '') throw new CliError('the command is empty');
        const opts: ExecCallOptions = {};
        const env = parseEnv(o.env ?? []);
        if (env) opts.env = env;
        if (o.cwd) opts.cwd = o.cwd;
        if (o.timeout !== undefined) opts.timeoutMs = parseDuration(o.timeout, '--timeout');
        if (o.background) opts.background = true;
        const sb = await Sandbox.get(id, ctx.client());
        const r = await sb.exec(command, opts);
        if (o.background) return void process.stdout.write(`started pid ${r.pid ?? '?'}\n`);
        if (r.stdout) process.stdout.write(r.stdout);
        if (r.stderr) process.stderr.write(r.stderr);
        if (r.truncated) process.stderr.write(ctx.err.yellow('warning: output was cut at 1 MiB per stream\n'));
        process.exitCode = r.exitCode;
      },
    );
  return withExamples(
    cmd,
    'sbx exec sbx_abc... -- uname -a',
    "sbx exec sbx_abc... -- 'ls / | wc -l'",
    "sbx exec --cwd /tmp --env NAME=x sbx_abc... -- sh -c 'echo $NAME'",
  );
}
