import type { Logger } from 'pino';
import type { RawData, WebSocket } from 'ws';
import type { PtyProcess, RuntimeDriver, SpawnOptions, StreamedProcess, TtyOptions } from '../runtime/driver.js';
import { FRAME, fromWireArgs, toErrorBody } from '../runtime/remote/wire.js';

/** Output bytes handed to the socket but not yet written to the kernel before the process is paused. */
const OUTPUT_WINDOW_BYTES = 1024 * 1024;

/**
 * One streamed process (`spawn`) or PTY (`tty`) over one WebSocket. The client's first text
 * frame is `{args}` (the driver call's arguments after none); the runner answers
 * `{type:'started', pid}` or `{type:'error', error}`. Then binary frames carry data (first
 * byte {@link FRAME}), text frames control: from the client `pause`, `resume`,
 * `kill {signal}`, `closeStdin`, `resize {cols, rows}`; from the runner `ack {bytes}`
 * (input handed on), `stdin {open:false}`, and last `exit {exit}`. Output is slowed (the
 * process paused) while the client asked so or while the socket has a window in flight.
 * A socket that closes first kills the process.
 */
export function serveStreamSocket(driver: RuntimeDriver, kind: 'spawn' | 'tty', ws: WebSocket, log: Logger): void {
  let proc: StreamedProcess | PtyProcess | null = null;
  let exited = false;
  let clientPaused = false;
  let inFlight = 0;
  let sinkPaused = false;
  const pendingAcks: number[] = [];
  const send = (msg: object) => {
    if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(msg));
  };
  const applyPause = () => {
    const want = clientPaused || inFlight > OUTPUT_WINDOW_BYTES;
    if (want !== sinkPaused) {
      sinkPaused = want;
      if (want) proc?.pause();
      else proc?.resume();
    }
  };
  const output = (tag: number, chunk: Buffer) => {
    if (ws.readyState !== ws.OPEN) return;
    const frame = Buffer.allocUnsafe(chunk.length + 1);
    frame[0] = tag;
    chunk.copy(frame, 1);
    inFlight += frame.length;
    ws.send(frame, () => {
      inFlight -= frame.length;
      applyPause();
    });
    applyPause();
  };
  let drainArmed = false;
  const ackPending = () => {
    drainArmed = false;
    const n = pendingAcks.splice(0).reduce((a, b) => a + b, 0);
    if (n) send({ type: 'ack', bytes: n });
  };
  const started = (p: StreamedProcess | PtyProcess) => {
    proc = p;
    send({ type: 'started', pid: p.pid });
    if (kind === 'spawn') {
      const sp = p as StreamedProcess;
      sp.onData((stream, chunk) => output(stream === 'stdout' ? FRAME.stdout : FRAME.stderr, chunk));
    } else (p as PtyProcess).onData((chunk) => output(FRAME.stdout, chunk));
    // A PTY's drain listener stays; a streamed process's is called once (armed per refusal).
    if (kind === 'tty') p.onDrain(ackPending);
    p.onExit((exit: object) => {
      exited = true;
      send({ type: 'exit', exit });
      ws.close(1000);
    });
  };
  ws.on('message', (data: RawData, isBinary: boolean) => {
    const buf = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
    if (isBinary) {
      if (!proc || buf.length < 1 || buf[0] !== FRAME.stdin) return;
      const bytes = buf.subarray(1);
      const accepted = proc.write(bytes);
      if (accepted) send({ type: 'ack', bytes: bytes.length });
      else {
        pendingAcks.push(bytes.length);
        if (kind === 'spawn' && !drainArmed) {
          drainArmed = true;
          proc.onDrain(ackPending);
        }
      }
      if (kind === 'spawn' && !(proc as StreamedProcess).stdinOpen) send({ type: 'stdin', open: false });
      return;
    }
    let msg: { type?: string; args?: unknown[]; signal?: NodeJS.Signals; cols?: number; rows?: number };
    try {
      msg = JSON.parse(buf.toString('utf8'));
    } catch {
      return;
    }
    if (!proc && msg.args) {
      const args = fromWireArgs(msg.args);
      const call =
        kind === 'spawn'
          ? driver.spawn(args[0] as string, args[1] as string[], args[2] as SpawnOptions | undefined)
          : driver.execTty(args[0] as string, args[1] as TtyOptions);
      call.then(
        (p) => {
          if (ws.readyState !== ws.OPEN) p.kill('SIGKILL');
          else started(p);
        },
        (e) => {
          send({ type: 'error', error: toErrorBody(e) });
          ws.close(1000);
        },
      );
      return;
    }
    if (!proc) return;
    switch (msg.type) {
      case 'pause':
        clientPaused = true;
        applyPause();
        break;
      case 'resume':
        clientPaused = false;
        applyPause();
        break;
      case 'kill':
        proc.kill(msg.signal);
        break;
      case 'closeStdin':
        if (kind === 'spawn') (proc as StreamedProcess).closeStdin();
        break;
      case 'resize':
        if (kind === 'tty' && Number.isInteger(msg.cols) && Number.isInteger(msg.rows))
          (proc as PtyProcess).resize(msg.cols!, msg.rows!);
        break;
    }
  });
  ws.on('close', () => {
    if (proc && !exited) {
      log.info({ kind, pid: proc.pid }, 'runner: the API replica left a live process; it is killed');
      proc.kill('SIGKILL');
    }
  });
  ws.on('error', () => ws.terminate());
}
