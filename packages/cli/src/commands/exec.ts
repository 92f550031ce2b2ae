import { Command } from 'commander';
import { ConnectionError, type ExecCallOptions, type ProcessHandle, Sandbox } from '@sandboxd/sdk';
import { withExamples, type Context } from '../context.js';
import { onReaderGone, readerGone } from '../pipe.js';
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

/** Options of `sbx exec`. */
interface ExecFlags {
  cwd?: string;
  env?: string[];
  timeout?: string;
  background?: boolean;
  stream: boolean;
  stdin?: boolean;
  user?: string;
}

/**
 * Streams a command's output to ours as it is written and resolves with its exit code.
 * With `forwardStdin`, our stdin goes to the command's (its end closes it). The first
 * Ctrl-C sends SIGINT to the command, a second one leaves at once (exit code 130); when
 * our stdout's reader goes away, the command gets SIGTERM and we exit with 141.
 */
async function stream(
  ctx: Context,
  sb: Sandbox,
  command: string,
  opts: ExecCallOptions,
  forwardStdin: boolean,
): Promise<number> {
  const starting = sb.exec(command, {
    ...opts,
    background: true,
    stdin: forwardStdin || undefined,
    onOutput: (chunk, s) => {
      if (s === 'stderr') process.stderr.write(chunk);
      else if (!readerGone()) process.stdout.write(chunk);
    },
  });
  starting.catch(() => {});
  // Set before exec resolves: the first output (and a Ctrl-C right after it) may come first.
  let interrupts = 0;
  const onSigint = () => {
    if (++interrupts > 1) process.exit(130);
    if (process.stderr.isTTY)
      process.stderr.write(ctx.err.dim('\nsending SIGINT to the command; Ctrl-C again to leave it running\n'));
    starting.then((h) => h.kill('SIGINT')).catch(() => {}); // it may have exited already
  };
  process.on('SIGINT', onSigint);
  // Our reader went away (`sbx exec ... | head`): stop the command too, as a pipe would;
  // main's handler (pipe.ts) then exits with 141.
  const forget = onReaderGone(() => starting.then((h) => h.kill('SIGTERM')));
  let h: ProcessHandle;
  try {
    h = await starting;
  } catch (e) {
    process.off('SIGINT', onSigint);
    forget();
    throw e;
  }
  if (forwardStdin)
    void (async () => {
      try {
        for await (const chunk of process.stdin) await h.sendStdin(chunk as Buffer);
        await h.closeStdin();
      } catch {
        /* the command exited or closed its stdin: stop forwarding */
      }
    })();
  try {
    const r = await h.wait();
    if (h.outputLost) process.stderr.write(ctx.err.yellow('warning: output was lost while reconnecting\n'));
    return r.exitCode;
  } catch (e) {
    if (e instanceof ConnectionError) throw new CliError(`lost the connection to pid ${h.pid} (${e.message})`);
    throw e;
  } finally {
    process.off('SIGINT', onSigint);
    forget();
    if (forwardStdin) process.stdin.destroy();
  }
}

/** `sbx exec ID -- cmd...`: runs a command, streams its output, exits with its exit code. */
export function execCommand(ctx: Context): Command {
  const cmd = new Command('exec')
    .description("run a command in a sandbox; streams its output and exits with the command's exit code")
    .argument('<id>', 'sandbox id')
    .argument(
      '<command...>',
      'the command: everything after the id (options go before it); one argument is shell text, several are quoted one by one',
    )
    .option('--cwd <dir>', 'working directory')
    .option('-e, --env <KEY=VALUE>', 'extra environment variable (repeatable)', collect)
    .option('-u, --user <user>', "run as this user (root, a uid, uid:gid or a user name; default: the image's)")
    .option(
      '-t, --timeout <duration>',
      'kill the command after this long (exit code 124); default: none when streaming, 60s with --no-stream',
    )
    .option('-i, --stdin', "forward stdin to the command; its end closes the command's stdin")
    .option(
      '--no-stream',
      'wait for the command and print its output at the end (one request; at most 1 MiB per stream)',
    )
    .option('-b, --background', 'start it in the background and print its pid')
    // As with `docker exec`, options go before the id; everything after it is the command.
    .passThroughOptions()
    .action(async (id: string, args: string[], o: ExecFlags) => {
      const command = commandLine(args[0] === '--' ? args.slice(1) : args);
      if (command.trim() === '') throw new CliError('the command is empty');
      if (o.stdin && (o.background || !o.stream))
        throw new CliError('-i needs a streamed exec (not with -b or --no-stream)');
      const opts: ExecCallOptions = {};
      const env = parseEnv(o.env ?? []);
      if (env) opts.env = env;
      if (o.cwd) opts.cwd = o.cwd;
      if (o.user) opts.user = o.user;
      if (o.timeout !== undefined) opts.timeoutMs = parseDuration(o.timeout, '--timeout');
      const sb = await Sandbox.get(id, ctx.client());
      if (o.background) {
        const h = await sb.exec(command, { ...opts, background: true });
        return void process.stdout.write(`started pid ${h.pid}\n`);
      }
      if (o.stream) {
        process.exitCode = await stream(ctx, sb, command, opts, Boolean(o.stdin));
        return;
      }
      const r = await sb.exec(command, { ...opts, background: false, stdin: false });
      if (r.stdout) process.stdout.write(r.stdout);
      if (r.stderr) process.stderr.write(r.stderr);
      if (r.truncated) process.stderr.write(ctx.err.yellow('warning: output was cut at 1 MiB per stream\n'));
      process.exitCode = r.exitCode;
    });
  return withExamples(
    cmd,
    'sbx exec sbx_abc... -- uname -a',
    "sbx exec sbx_abc... -- 'ls / | wc -l'",
    "sbx exec --cwd /tmp --env NAME=x sbx_abc... -- sh -c 'echo $NAME'",
    'tar -c src | sbx exec -i sbx_abc... -- tar -x -C /work',
  );
}
