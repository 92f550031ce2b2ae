import { Code, ConnectError, type HandlerContext, type ServiceImpl } from '@connectrpc/connect';
import { isSandboxdError } from '@sandboxd/protocol';
import type { Services } from '../../services/index.js';
import type { ProcessFollower, ProcessFollowing } from '../../runtime/processes/types.js';
import type { LiveProcess } from '../../services/processes.js';
import type { Terminal } from '../../services/terminals.js';
import {
  CLOSE,
  MAX_TERMINAL_SIZE,
  type TerminalAttachment,
  type TerminalClient,
} from '../../runtime/terminals/types.js';
import { connectErrors, type EnvdCall, envdCall, userOf } from './context.js';
import { EventQueue } from './event-queue.js';
import type { Process, ProcessInput, ProcessSelector } from './gen/process_pb.js';
import {
  describeSelector,
  type Exit,
  endEvent,
  keepAliveMs,
  selectorOf,
  signalOf,
  startDeadlineMs,
} from './process-wire.js';

/** What the process service uses. */
export interface EnvdProcessDeps {
  services: Pick<Services, 'exec' | 'processes' | 'terminals'>;
}

/** Bytes of output a stream holds before the process it follows is paused. */
const PROCESS_HIGH_WATER = 64 * 1024;
/** A paused process resumes once its stream holds no more than this. */
const PROCESS_LOW_WATER = 16 * 1024;
/** The error of a command stream whose sandbox went while the command ran. */
const SANDBOX_GONE = 'The sandbox was killed or stopped while the command ran';
/** PTY size when a Start names none. */
const DEFAULT_PTY = { cols: 80, rows: 24 };

/** One event of a Start or Connect stream (their responses have the same shape). */
type WireEvent = {
  event: {
    event:
      | { case: 'start'; value: { pid: number } }
      | { case: 'data'; value: { output: { case: 'stdout' | 'stderr' | 'pty'; value: Uint8Array } } }
      | { case: 'end'; value: ReturnType<typeof endEvent> }
      | { case: 'keepalive'; value: Record<string, never> };
  };
};

/** What a selector found: a process started through the API, or a program on a PTY (a terminal). */
type Target = { process: LiveProcess } | { pty: Terminal };

const keepaliveEvent = (): WireEvent => ({ event: { event: { case: 'keepalive', value: {} } } });
const startEvent = (pid: number): WireEvent => ({ event: { event: { case: 'start', value: { pid } } } });
const endOf = (e: Exit): WireEvent => ({ event: { event: { case: 'end', value: endEvent(e) } } });

/**
 * envd's `process.Process` over sandboxd's services, as E2B's SDK uses it
 * (`sandbox.commands`, `sandbox.pty`):
 *  - Start runs `cmd args` as a login of the call's user (HOME, USER, LOGNAME; in `cwd`,
 *    by default the user's home) through the exec service, or on a PTY through the
 *    terminal service, so both are sandboxd's own processes and terminals (listed by its
 *    API; a PTY takes several clients). The stream sends `start`, output, `end`, then
 *    closes. The call's deadline (`Connect-Timeout-Ms`, the SDK's `timeoutMs`) is the
 *    program's, as with envd: when it passes the program is killed (SIGKILL) and the
 *    stream ends with `deadline_exceeded`. Without a deadline, a client that goes leaves
 *    the program running (Connect finds it again).
 *  - Connect follows a running program's later output and its end.
 *  - Selectors (pid or tag) name running programs only; another pid is `not_found`.
 * Streams send `keepalive` events after each `Keepalive-Ping-Interval` seconds of silence;
 * output is backpressured (a stream that is not read pauses its process, or its PTY
 * through the terminal's flow control).
 */
export function processService(d: EnvdProcessDeps): ServiceImpl<typeof Process> {
  const { exec, processes, terminals } = d.services;

  async function find(call: EnvdCall, selector: ProcessSelector | undefined): Promise<Target> {
    const sel = selectorOf(selector);
    const [procs, ptys] = await connectErrors(() =>
      Promise.all([
        processes.running(call.accountId, call.sandbox.id),
        terminals.list(call.accountId, call.sandbox.id),
      ]),
    );
    const match = (pid: number, tag: string | null) => ('pid' in sel ? pid === sel.pid : tag === sel.tag);
    const p = procs.find((x) => match(x.pid, x.tag));
    if (p) return { process: p };
    const t = ptys.find((x) => match(x.pid, x.tag));
    if (t) return { pty: t };
    throw new ConnectError(`${describeSelector(sel)} not found`, Code.NotFound);
  }

  async function writeInput(call: EnvdCall, target: Target, input: ProcessInput['input'] | undefined): Promise<void> {
    if (!input?.case) throw new ConnectError('input (stdin or pty bytes) is required', Code.InvalidArgument);
    if (input.case === 'pty') {
      if (!('pty' in target)) throw notPty(target.process.pid, 'send its input as stdin');
      await connectErrors(() => target.pty.write(input.value));
      return;
    }
    if ('pty' in target)
      throw new ConnectError(`process ${target.pty.pid} runs on a PTY: send its input as pty`, Code.InvalidArgument);
    const pid = target.process.pid;
    await connectErrors(() => processes.writeStdin(call.accountId, call.sandbox.id, pid, [input.value]));
  }

  return {
    async *start(req, ctx) {
      const call = envdCall(ctx);
      const cfg = req.process;
      if (!cfg?.cmd) throw new ConnectError('process.cmd is required', Code.InvalidArgument);
      const deadline = startDeadlineMs(ctx.requestHeader.get('connect-timeout-ms'));
      const argv = [cfg.cmd, ...cfg.args];
      const common = {
        argv,
        env: cfg.envs,
        cwd: cfg.cwd,
        user: userOf(call),
        login: true,
        tag: req.tag,
        timeoutMs: deadline,
      };
      if (req.pty) {
        const size = req.pty.size;
        const t = await connectErrors(() =>
          terminals.start(call.accountId, call.sandbox.id, {
            ...common,
            cols: size?.cols || DEFAULT_PTY.cols,
            rows: size?.rows || DEFAULT_PTY.rows,
            keepWhileIdle: true,
          }),
        );
        yield* followTerminal(t, ctx);
        return;
      }
      // envd keeps stdin open unless the request says otherwise (SDKs before stdin: false).
      const p = await connectErrors(() =>
        exec.spawn(call.accountId, call.sandbox.id, { ...common, stdin: req.stdin ?? true }),
      );
      yield* followProcess(p, ctx, true);
    },

    async *connect(req, ctx) {
      const target = await find(envdCall(ctx), req.process);
      if ('pty' in target) yield* followTerminal(target.pty, ctx);
      else yield* followProcess(target.process, ctx, false);
    },

    async list(_req, ctx) {
      const call = envdCall(ctx);
      const [procs, ptys] = await connectErrors(() =>
        Promise.all([
          processes.running(call.accountId, call.sandbox.id),
          terminals.list(call.accountId, call.sandbox.id),
        ]),
      );
      const info = (pid: number, tag: string | null, argv: string[], envs: Record<string, string>, cwd: string) => ({
        pid,
        ...(tag !== null && { tag }),
        config: { cmd: argv[0], args: argv.slice(1), envs, cwd },
      });
      return {
        processes: [
          ...procs.map((p) => info(p.pid, p.tag, p.argv, p.env, p.cwd)),
          ...ptys.map((t) => info(t.pid, t.tag, t.argv, t.env, t.cwd)),
        ],
      };
    },

    async sendInput(req, ctx) {
      const call = envdCall(ctx);
      await writeInput(call, await find(call, req.process), req.input?.input);
      return {};
    },

    async streamInput(reqs, ctx) {
      const call = envdCall(ctx);
      let target: Target | undefined;
      for await (const r of reqs) {
        const ev = r.event;
        if (ev.case === 'start') target = await find(call, ev.value.process);
        else if (ev.case === 'data') {
          if (!target) throw new ConnectError('the first message names the process (start)', Code.InvalidArgument);
          await writeInput(call, target, ev.value.input?.input);
        }
      }
      return {};
    },

    async closeStdin(req, ctx) {
      const call = envdCall(ctx);
      const target = await find(call, req.process);
      if ('pty' in target)
        throw notPty(target.pty.pid, 'a PTY has no stdin to close: send Ctrl-D (0x04) as input', true);
      // Closing a closed stdin is not an error (as with envd).
      if (target.process.stdinOpen)
        await connectErrors(() =>
          processes.closeStdin(call.accountId, call.sandbox.id, target.process.pid).catch((e: unknown) => {
            if (!(isSandboxdError(e) && e.kind === 'conflict')) throw e;
          }),
        );
      return {};
    },

    async sendSignal(req, ctx) {
      const call = envdCall(ctx);
      const signal = signalOf(req.signal);
      const target = await find(call, req.process);
      if ('pty' in target) await connectErrors(() => target.pty.signal(signal));
      else await connectErrors(() => processes.signal(call.accountId, call.sandbox.id, target.process.pid, signal));
      return {};
    },

    async update(req, ctx) {
      const call = envdCall(ctx);
      const target = await find(call, req.process);
      if (!req.pty) return {};
      if (!('pty' in target)) throw notPty(target.process.pid, 'it cannot be resized');
      const { cols = 0, rows = 0 } = req.pty.size ?? {};
      const ok = (n: number) => n >= 1 && n <= MAX_TERMINAL_SIZE;
      if (!ok(cols) || !ok(rows))
        throw new ConnectError(
          `PTY size ${cols}x${rows}: cols and rows are 1..${MAX_TERMINAL_SIZE}`,
          Code.InvalidArgument,
        );
      await connectErrors(() => target.pty.resize(cols, rows));
      return {};
    },
  };
}

function notPty(pid: number, what: string, isPty = false): ConnectError {
  return new ConnectError(
    isPty ? `process ${pid}: ${what}` : `process ${pid} has no PTY: ${what}`,
    Code.InvalidArgument,
  );
}

/**
 * A process's events as a stream: `start`, its output as `stdout`/`stderr` (from the start
 * of what is kept with `replay`, else only what comes next), `end`. The process is paused
 * while the stream holds {@link PROCESS_HIGH_WATER} bytes; the stream's end (the client
 * went, the deadline) detaches it and leaves the process running. A stream whose runner
 * connection is lost fails with `unavailable` (the process may still run there: Connect
 * finds it again).
 */
async function* followProcess(p: LiveProcess, ctx: HandlerContext, replay: boolean): AsyncGenerator<WireEvent> {
  let blocked = false;
  let following: ProcessFollowing | null = null;
  const q = new EventQueue<WireEvent>({
    highWater: PROCESS_HIGH_WATER,
    onDrained: (held) => {
      if (blocked && held <= PROCESS_LOW_WATER) {
        blocked = false;
        following?.drained();
      }
    },
  });
  const follower: ProcessFollower = {
    send: (ev) => {
      let ok: boolean;
      if (ev.type === 'start') ok = q.push(startEvent(ev.pid));
      else if (ev.type === 'exit' && ev.exit.agentGone) {
        // The sandbox went under the process (killed, stopped, its time up): no end, as with
        // envd, whose connection drops with its VM; the SDK raises its TimeoutError.
        q.fail(new ConnectError(SANDBOX_GONE, Code.Unavailable));
        ok = true;
      } else if (ev.type === 'exit') ok = q.push(endOf(ev.exit));
      else
        ok = q.push(
          { event: { event: { case: 'data', value: { output: { case: ev.stream, value: ev.chunk } } } } },
          ev.chunk.length,
        );
      if (!ok) blocked = true;
      return ok;
    },
    end: () => q.end(),
    lost: (reason) => q.fail(new ConnectError(reason, Code.Unavailable)),
  };
  following = await connectErrors(() => p.follow(follower, { reconnect: false, follow: true, replay }));
  const f = following;
  try {
    yield* q.events(ctx.signal, keepAliveOf(ctx));
  } finally {
    f.detach();
  }
}

/**
 * A PTY's events as a stream: `start` with its pid, its output as `pty` bytes, `end`. The
 * stream is one client of the terminal: the terminal's flow control pauses the PTY while
 * every client is behind, and drops a client far behind while another keeps up (the
 * stream then fails with `aborted`). A stream whose runner connection is lost fails with
 * `unavailable` (the program may still run there: Connect finds it again).
 */
async function* followTerminal(t: Terminal, ctx: HandlerContext): AsyncGenerator<WireEvent> {
  let attachment: TerminalAttachment | undefined;
  const q = new EventQueue<WireEvent>({ highWater: Infinity, onDrained: () => attachment?.written() });
  q.push(startEvent(t.pid));
  const client: TerminalClient = {
    sendOutput: (chunk) => {
      q.push({ event: { event: { case: 'data', value: { output: { case: 'pty', value: chunk } } } } }, chunk.length);
    },
    sendControl: (msg) => {
      if (msg.type === 'exit') q.push(endOf(msg));
    },
    get bufferedBytes() {
      return q.buffered;
    },
    close: (code, reason) => {
      if (code === CLOSE.tooSlow) q.fail(new ConnectError(reason, Code.Aborted));
      else if (code === CLOSE.lostRunner) q.fail(new ConnectError(reason, Code.Unavailable));
      else q.end();
    },
  };
  const a = await connectErrors(() => t.attach(client, { replay: false }));
  attachment = a;
  try {
    yield* q.events(ctx.signal, keepAliveOf(ctx));
  } finally {
    a.detach();
  }
}

function keepAliveOf(ctx: HandlerContext) {
  return { intervalMs: keepAliveMs(ctx.requestHeader.get('keepalive-ping-interval')), event: keepaliveEvent };
}
