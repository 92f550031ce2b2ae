import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command } from 'commander';
import { type Result, type RunCodeOptions, Sandbox } from '@sandboxd/sdk';
import { withExamples, type Context } from '../context.js';
import { CliError, collect, colorEnabled, parseDuration, parseEnv } from '../ui.js';

/** Options of `sbx run`. */
interface RunFlags {
  language?: string;
  context?: string;
  env?: string[];
  file?: string;
  outDir?: string;
  timeout?: string;
  json?: boolean;
}

/** The result formats saved to files, with their extension; base64 except svg (text). */
const FILE_FORMATS = [
  ['png', 'png'],
  ['jpeg', 'jpg'],
  ['svg', 'svg'],
  ['pdf', 'pdf'],
] as const;

// biome-ignore lint/suspicious/noControlCharactersInRegex: ESC starts an ANSI sequence
const ANSI = /\x1b\[[0-9;]*[A-Za-z]/g;

/** Reads all of stdin as text. */
async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** The code to run: the argument, `-` (stdin), `-f FILE`, or piped stdin when neither is given. */
async function codeOf(arg: string | undefined, o: RunFlags): Promise<string> {
  if (arg !== undefined && o.file !== undefined) throw new CliError('give the code or -f FILE, not both');
  if (o.file !== undefined) {
    try {
      return o.file === '-' ? await readStdin() : readFileSync(o.file, 'utf8');
    } catch (e) {
      throw new CliError(`cannot read ${o.file}: ${(e as Error).message}`);
    }
  }
  if (arg === '-' || (arg === undefined && !process.stdin.isTTY)) return readStdin();
  if (arg === undefined) throw new CliError("give the code ('print(1)'), -f FILE, or - to read stdin");
  return arg;
}

/**
 * Writes each file format of `r` to `<dir>/result-<n>.<ext>` with the first `n` (from 1)
 * that no earlier file of any format uses, and answers the paths written.
 */
export function saveResultFiles(r: Result, dir: string): string[] {
  const formats = FILE_FORMATS.filter(([f]) => typeof r[f] === 'string' && r[f] !== '');
  if (!formats.length) return [];
  mkdirSync(dir, { recursive: true });
  let n = 1;
  while (FILE_FORMATS.some(([, ext]) => existsSync(join(dir, `result-${n}.${ext}`)))) n++;
  return formats.map(([f, ext]) => {
    const path = join(dir, `result-${n}.${ext}`);
    const value = r[f] as string;
    writeFileSync(path, f === 'svg' ? value : Buffer.from(value, 'base64'));
    return path;
  });
}

/** The text a result prints as: its text, else markdown, html, latex, json, javascript. */
export function resultText(r: Result): string | undefined {
  if (r.text !== undefined) return r.text;
  for (const v of [r.markdown, r.html, r.latex, r.javascript]) if (v !== undefined) return v;
  if (r.json !== undefined) return JSON.stringify(r.json, null, 2);
  return undefined;
}

/** `sbx run ID 'code'`: runs code in the sandbox's code interpreter, prints what it gave. */
export function runCommand(ctx: Context): Command {
  const cmd = new Command('run')
    .description(
      'run code in a stateful kernel of a code-interpreter sandbox (local/code-interpreter): streams its output, prints results, saves images; exits 1 on a code error',
    )
    .argument('<id>', 'sandbox id')
    .argument('[code]', "the code; '-' reads it from stdin (as does no code with stdin piped)")
    .option('-l, --language <language>', 'python (default), javascript, typescript, bash, r')
    .option('--context <id>', 'run in this context (see the SDK’s createCodeContext); not with -l')
    .option('-e, --env <NAME=VALUE>', 'env var for this run only (repeatable)', collect)
    .option('-f, --file <file>', 'read the code from this file (- for stdin)')
    .option('--out-dir <dir>', 'where image results are saved (result-<n>.png ...); default: the current directory')
    .option('-t, --timeout <duration>', 'interrupt the run after this long (default 5m)')
    .option('--json', 'print each event as one JSON line instead')
    .action(async (id: string, arg: string | undefined, o: RunFlags) => {
      if (o.language !== undefined && o.context !== undefined) throw new CliError('give -l or --context, not both');
      const code = await codeOf(arg, o);
      const opts: RunCodeOptions = {};
      if (o.language !== undefined) opts.language = o.language;
      if (o.context !== undefined) opts.context = o.context;
      const envs = parseEnv(o.env ?? []);
      if (envs) opts.envs = envs;
      if (o.timeout !== undefined) opts.timeoutMs = parseDuration(o.timeout, '--timeout');
      const dir = o.outDir ?? process.cwd();
      const line = (v: unknown) => process.stdout.write(`${JSON.stringify(v)}\n`);
      const color = colorEnabled(process.stderr);
      if (o.json) {
        opts.onStdout = (text, at) => line({ type: 'stdout', text, timestamp: at.toISOString() });
        opts.onStderr = (text, at) => line({ type: 'stderr', text, timestamp: at.toISOString() });
        opts.onResult = (r) => line({ type: 'result', result: r.toJSON() });
        opts.onError = (e) => line({ type: 'error', ...e });
      } else {
        opts.onStdout = (text) => void process.stdout.write(text);
        opts.onStderr = (text) => void process.stderr.write(text);
        opts.onResult = (r) => {
          const saved = saveResultFiles(r, dir);
          for (const p of saved) process.stdout.write(`${ctx.out.dim('saved')} ${p}\n`);
          const text = resultText(r);
          // A plot's text is only its repr (`<Figure size ...>`): the file says more.
          if (text !== undefined && !(saved.length && r.text === text && /^<.*>$/s.test(text.trim())))
            process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
        };
        opts.onError = (e) => {
          const tb = color ? e.traceback : e.traceback.replace(ANSI, '');
          if (tb) process.stderr.write(tb.endsWith('\n') ? tb : `${tb}\n`);
          const head = `${e.name}: ${e.value}`;
          if (!tb.includes(head)) process.stderr.write(`${ctx.err.red(head)}\n`);
        };
      }
      // Ctrl-C interrupts the run in the sandbox (its connection closes) and leaves.
      const stop = new AbortController();
      const onSigint = () => stop.abort(new CliError('interrupted', 130));
      process.on('SIGINT', onSigint);
      try {
        const sb = await Sandbox.get(id, ctx.client());
        const ex = await sb.runCode(code, { ...opts, signal: stop.signal });
        if (o.json) {
          if (ex.executionCount !== undefined) line({ type: 'executionCount', count: ex.executionCount });
          line({ type: 'end' });
        }
        if (ex.error) process.exitCode = 1;
      } finally {
        process.off('SIGINT', onSigint);
      }
    });
  return withExamples(
    cmd,
    "sbx run sbx_abc... 'import numpy as np; np.arange(5).sum()'",
    'sbx run -l javascript sbx_abc... "await Promise.resolve(6 * 7)"',
    'sbx run sbx_abc... -f analysis.py --out-dir plots',
    "echo 'echo $HOME' | sbx run -l bash sbx_abc... -",
  );
}
