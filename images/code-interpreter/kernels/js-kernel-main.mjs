/**
 * Main thread of the JavaScript / TypeScript kernel (see js-kernel.mjs for the protocol).
 * Reads requests from stdin, applies `env` and `cwd`, hands the code to the worker thread,
 * writes the worker's events to stdout with the request's id, and turns SIGINT into an
 * interrupt of the worker. It never runs user code, so it is never busy.
 */
import { createInterface } from 'node:readline';
import { MessageChannel, SHARE_ENV, Worker } from 'node:worker_threads';

/** How long an interrupt waits for the inspector to confirm the termination before going on. */
const TERMINATE_WAIT_MS = 2000;

function send(event) {
  process.stdout.write(`${JSON.stringify(event)}\n`);
}

function log(message) {
  process.stderr.write(`js-kernel: ${message}\n`);
}

/** Sets `env` in process.env (shared with the worker); returns the function that undoes it. */
function applyEnv(env) {
  const saved = [];
  if (env && typeof env === 'object') {
    for (const [name, value] of Object.entries(env)) {
      if (value === null || value === undefined) continue;
      saved.push([name, Object.hasOwn(process.env, name) ? process.env[name] : undefined]);
      process.env[name] = String(value);
    }
  }
  return () => {
    for (const [name, value] of saved.reverse()) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  };
}

/**
 * Connects an inspector session to the worker, so a busy cell can be terminated. Resolves to
 * a function `terminate()` returning a promise settled once the worker confirmed (or after a
 * bounded wait), or null where this Node has no inspector.
 */
async function workerTerminator() {
  let inspector;
  try {
    inspector = await import('node:inspector');
    const session = new inspector.Session();
    session.connect();
    let sessionId = null;
    let nextId = 1;
    const waiting = new Map();
    session.on('NodeWorker.attachedToWorker', (m) => {
      sessionId = m.params.sessionId;
    });
    session.on('NodeWorker.receivedMessageFromWorker', (m) => {
      try {
        const msg = JSON.parse(m.params.message);
        waiting.get(msg.id)?.();
        waiting.delete(msg.id);
      } catch {
        /* not an answer of ours */
      }
    });
    session.post('NodeWorker.enable', { waitForDebuggerOnStart: false });
    return () =>
      new Promise((resolve) => {
        if (sessionId === null) return resolve(false);
        const id = nextId++;
        const timer = setTimeout(() => {
          waiting.delete(id);
          resolve(false);
        }, TERMINATE_WAIT_MS);
        waiting.set(id, () => {
          clearTimeout(timer);
          resolve(true);
        });
        session.post('NodeWorker.sendMessageToWorker', {
          sessionId,
          message: JSON.stringify({ id, method: 'Runtime.terminateExecution' }),
        });
      });
  } catch (err) {
    log(`no inspector, busy cells cannot be interrupted: ${err?.message ?? err}`);
    return null;
  }
}

export async function runMain(argv) {
  const typescript = argv.includes('--typescript');
  const option = (name) => {
    const arg = argv.find((a) => a.startsWith(`--${name}=`));
    return arg ? arg.slice(name.length + 3) : null;
  };
  const typescriptModule = option('typescript-module');
  const acornModule = option('acorn-module');
  const parser = option('parser');

  const syncFlag = new Int32Array(new SharedArrayBuffer(4));
  const sync = new MessageChannel();
  const worker = new Worker(new URL('./js-kernel-worker.mjs', import.meta.url), {
    env: SHARE_ENV,
    stdout: true,
    stderr: true,
    workerData: { typescript, typescriptModule, acornModule, parser, syncFlag, syncPort: sync.port2 },
    transferList: [sync.port2],
  });
  const terminate = await workerTerminator();

  const queue = [];
  /** The running request: its id and the undo of its env, or null. */
  let current = null;
  let executionCount = 0;
  let closing = false;

  const next = () => {
    if (current || queue.length === 0) return;
    const req = queue.shift();
    current = { id: req.id, restore: applyEnv(req.env), interrupting: false };
    let preError = null;
    if (typeof req.cwd === 'string' && req.cwd !== '') {
      try {
        process.chdir(req.cwd);
      } catch (err) {
        preError = { name: 'Error', value: `cannot change directory to ${req.cwd}: ${err.message}` };
      }
    }
    const code = typeof req.code === 'string' ? req.code : '';
    worker.postMessage({ type: 'run', id: req.id, code, preError });
  };

  const finish = (id, count) => {
    if (!current || current.id !== id) return;
    current.restore();
    current = null;
    executionCount = count;
    send({ id, type: 'end', execution_count: count });
    next();
    if (closing && !current) worker.terminate();
  };

  const forwardStream = (type) => (chunk) => {
    const text = chunk.toString('utf8');
    if (current) send({ id: current.id, type, text });
    else log(`${type} outside a request: ${text.trimEnd()}`);
  };
  worker.stdout.on('data', forwardStream('stdout'));
  worker.stderr.on('data', forwardStream('stderr'));

  worker.on('message', (msg) => {
    switch (msg.type) {
      case 'stdout':
      case 'stderr':
        if (current) send({ id: current.id, type: msg.type, text: msg.text });
        else log(`${msg.type} outside a request: ${msg.text.trimEnd()}`);
        break;
      case 'result':
        if (current && msg.id === current.id) send({ id: msg.id, type: 'result', data: msg.data, main: msg.main });
        break;
      case 'error': {
        const id = msg.id ?? current?.id;
        const event = { type: 'error', name: msg.name, value: msg.value, traceback: msg.traceback };
        if (current && id === current.id) send({ id, ...event });
        else log(`${msg.name}: ${msg.value} (no request running)`);
        break;
      }
      case 'end':
        finish(msg.id, msg.execution_count);
        break;
      case 'chdir': {
        let reply;
        try {
          process.chdir(msg.dir);
          reply = { ok: true };
        } catch (err) {
          reply = { ok: false, code: err.code, message: err.message };
        }
        sync.port1.postMessage(reply);
        Atomics.store(syncFlag, 0, 1);
        Atomics.notify(syncFlag, 0);
        break;
      }
      default:
        log(`unknown message from the worker: ${JSON.stringify(msg)}`);
    }
  });
  worker.on('error', (err) => log(`worker error: ${err?.stack ?? err}`));
  worker.on('exit', (code) => {
    if (closing) process.exit(0);
    if (current) {
      send({
        id: current.id,
        type: 'error',
        name: 'KernelDied',
        value: `the kernel exited (code ${code})`,
        traceback: [],
      });
      current.restore();
      send({ id: current.id, type: 'end', execution_count: executionCount + 1 });
    }
    process.exit(code === 0 ? 1 : code);
  });

  process.on('SIGINT', async () => {
    if (!current || current.interrupting) return;
    const target = current;
    target.interrupting = true;
    if (terminate) {
      const confirmed = terminate();
      // Gives the termination a JavaScript execution to end when the worker is idle (awaiting).
      worker.postMessage({ type: 'absorb' });
      await confirmed;
    }
    if (current === target) worker.postMessage({ type: 'interrupt', id: target.id });
  });
  process.on('SIGTERM', () => process.exit(0));
  // The server went away: nobody reads the events any more.
  process.stdout.on('error', () => process.exit(0));

  const rl = createInterface({ input: process.stdin, crlfDelay: Number.POSITIVE_INFINITY });
  rl.on('line', (line) => {
    if (line.trim() === '') return;
    let req;
    try {
      req = JSON.parse(line);
    } catch {
      log(`ignored a request that is not JSON: ${line.slice(0, 200)}`);
      return;
    }
    if (!req || typeof req !== 'object' || req.id === undefined) {
      log(`ignored a request without an id: ${line.slice(0, 200)}`);
      return;
    }
    queue.push(req);
    next();
  });
  // EOF: the queued requests still run, then the kernel ends.
  rl.on('close', () => {
    closing = true;
    if (!current) worker.terminate();
  });
}
