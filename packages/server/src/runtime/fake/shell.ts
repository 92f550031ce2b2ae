import type { ExecResult } from '../driver.js';

/** The file system a fake command sees: paths are absolute. */
export interface FakeFs {
  read(path: string): string | undefined;
  write(path: string, data: string, append: boolean): void;
}

/** Where a fake script runs. */
export interface FakeShellContext {
  env: Record<string, string>;
  cwd: string;
  fs: FakeFs;
  /** Foreground timeout; `sleep` past it ends the script with 124. */
  timeoutMs: number;
  maxOutputBytes: number;
  /** Terminal size, for `stty size` on a PTY. */
  tty?: { cols: number; rows: number };
  /** Background scripts do not wait in `sleep`. */
  background?: boolean;
}

const SIGNAL_EXIT = Symbol('exit');
/** Shells `command -v` finds, and folders `test -d` finds, in every fake sandbox. */
const FAKE_SHELLS = new Set(['sh', 'bash']);
const FAKE_DIRS = new Set(['/', '/root', '/tmp', '/home', '/etc', '/bin', '/usr', '/var']);

/**
 * The fake driver's tiny shell. Statements split on `;`; each is one command with
 * optional `>&2`, `> file` or `>> file`. Commands: `echo [-n]`, `printenv [X]`, `pwd`,
 * `cat FILE`, `true`, `false`, `exit N`, `sleep S`, `kill -9 $$` (exit 137),
 * `head -c N /dev/zero`, `stty size`, `command -v X` (knows `sh` and `bash`), `test -d P` /
 * `test -x P` (standard folders and the two shells). `$VAR`, `${VAR}` and `$$` expand; quotes group.
 * Anything else exits 127, as `sh` does.
 */
export async function runFakeCommand(script: string, ctx: FakeShellContext): Promise<ExecResult> {
  let stdout = '';
  let stderr = '';
  let exitCode = 0;
  let timedOut = false;
  const started = Date.now();
  try {
    for (const stmt of splitStatements(script)) {
      const { words, redirect } = parseStatement(stmt, ctx.env);
      if (words.length === 0) continue;
      const r = await runOne(words, ctx, started);
      exitCode = r.code;
      if (r.timedOut) timedOut = true;
      let out = r.out;
      if (redirect?.kind === 'stderr') {
        stderr += out;
        out = '';
      } else if (redirect?.kind === 'file') {
        ctx.fs.write(absolute(redirect.path, ctx.cwd), out, redirect.append);
        out = '';
      }
      stdout += out;
      stderr += r.err;
      if (r.exit) break;
    }
  } catch (e) {
    if (e !== SIGNAL_EXIT) throw e;
  }
  const cap = (s: string) =>
    Buffer.byteLength(s) > ctx.maxOutputBytes ? Buffer.from(s).subarray(0, ctx.maxOutputBytes).toString() : s;
  const truncated = Buffer.byteLength(stdout) > ctx.maxOutputBytes || Buffer.byteLength(stderr) > ctx.maxOutputBytes;
  return { stdout: cap(stdout), stderr: cap(stderr), exitCode, truncated, timedOut };
}

interface Outcome {
  out: string;
  err: string;
  code: number;
  exit?: boolean;
  timedOut?: boolean;
}

async function runOne([cmd, ...args]: string[], ctx: FakeShellContext, started: number): Promise<Outcome> {
  const ok = (out = ''): Outcome => ({ out, err: '', code: 0 });
  switch (cmd) {
    case 'true':
      return ok();
    case 'false':
      return { out: '', err: '', code: 1 };
    case 'echo': {
      const noNl = args[0] === '-n';
      const text = (noNl ? args.slice(1) : args).join(' ');
      return ok(noNl ? text : `${text}\n`);
    }
    case 'pwd':
      return ok(`${ctx.cwd}\n`);
    case 'printenv': {
      if (args[0] === undefined)
        return ok(
          Object.entries(ctx.env)
            .map(([k, v]) => `${k}=${v}\n`)
            .join(''),
        );
      const v = ctx.env[args[0]];
      return v === undefined ? { out: '', err: '', code: 1 } : ok(`${v}\n`);
    }
    case 'cat': {
      const p = absolute(args[0] ?? '', ctx.cwd);
      const v = ctx.fs.read(p);
      return v === undefined ? { out: '', err: `cat: ${args[0]}: No such file or directory\n`, code: 1 } : ok(v);
    }
    case 'exit': {
      const n = Number(args[0] ?? 0);
      return { out: '', err: '', code: Number.isInteger(n) ? ((n % 256) + 256) % 256 : 2, exit: true };
    }
    case 'kill':
      return args[0] === '-9'
        ? { out: '', err: '', code: 137, exit: true }
        : { out: '', err: 'kill: usage\n', code: 2 };
    case 'head': {
      const n = Number(args[1]);
      if (args[0] !== '-c' || args[2] !== '/dev/zero' || !Number.isInteger(n) || n < 0)
        return { out: '', err: 'head: unsupported\n', code: 1 };
      return ok('\0'.repeat(Math.min(n, 64 * 1024 * 1024)));
    }
    case 'command': {
      const found = args[0] === '-v' && args[1] !== undefined && FAKE_SHELLS.has(args[1]);
      return found ? ok(`/bin/${args[1]}\n`) : { out: '', err: '', code: 1 };
    }
    case 'test': {
      const p = args[1] ?? '';
      const yes =
        (args[0] === '-d' && FAKE_DIRS.has(p.replace(/(.)\/+$/, '$1'))) ||
        (args[0] === '-x' && FAKE_SHELLS.has(p.replace(/^\/(usr\/)?bin\//, '')));
      return { out: '', err: '', code: yes ? 0 : 1 };
    }
    case 'stty':
      return ctx.tty && args[0] === 'size'
        ? ok(`${ctx.tty.rows} ${ctx.tty.cols}\n`)
        : { out: '', err: 'stty: not a tty\n', code: 1 };
    case 'sleep': {
      const ms = Number(args[0] ?? 0) * 1000;
      if (!(ms >= 0)) return { out: '', err: 'sleep: invalid time interval\n', code: 1 };
      if (ctx.background) return ok();
      const left = ctx.timeoutMs - (Date.now() - started);
      await new Promise((r) => setTimeout(r, Math.max(0, Math.min(ms, left))));
      return ms > left ? { out: '', err: '', code: 124, exit: true, timedOut: true } : ok();
    }
    default:
      return { out: '', err: `sh: 1: ${cmd}: not found\n`, code: 127 };
  }
}

function splitStatements(s: string): string[] {
  const out: string[] = [];
  let cur = '';
  let q: string | null = null;
  for (const c of s) {
    if (q) {
      if (c === q) q = null;
      cur += c;
    } else if (c === "'" || c === '"') {
      q = c;
      cur += c;
    } else if (c === ';' || c === '\n') {
      out.push(cur);
      cur = '';
    } else cur += c;
  }
  out.push(cur);
  return out.map((x) => x.trim()).filter(Boolean);
}

type Redirect = { kind: 'stderr' } | { kind: 'file'; path: string; append: boolean };

function parseStatement(stmt: string, env: Record<string, string>): { words: string[]; redirect?: Redirect } {
  const words: string[] = [];
  let redirect: Redirect | undefined;
  const re = /'([^']*)'|"((?:[^"\\]|\\.)*)"|(>>|>&2|>)|(\S+)/g;
  let pendingFile: { append: boolean } | null = null;
  for (let m = re.exec(stmt); m; m = re.exec(stmt)) {
    if (m[3] === '>&2') redirect = { kind: 'stderr' };
    else if (m[3]) pendingFile = { append: m[3] === '>>' };
    else {
      const w = m[1] !== undefined ? m[1] : expand(m[2] ?? m[4], env);
      if (pendingFile) {
        redirect = { kind: 'file', path: w, append: pendingFile.append };
        pendingFile = null;
      } else words.push(w);
    }
  }
  return { words, redirect };
}

function expand(s: string, env: Record<string, string>): string {
  return s.replace(/\$\$|\$([A-Za-z_][A-Za-z0-9_]*)|\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (x, a, b) =>
    x === '$$' ? '1' : (env[a ?? b] ?? ''),
  );
}

function absolute(p: string, cwd: string): string {
  return p.startsWith('/') ? p : `${cwd.replace(/\/$/, '')}/${p}`;
}
