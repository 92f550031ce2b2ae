/**
 * Worker thread of the JavaScript / TypeScript kernel: runs the cells. Its globals are the
 * notebook's state. Messages from the main thread: `{type: 'run', id, code, preError}`,
 * `{type: 'interrupt', id}`, `{type: 'absorb'}` (a no-op that lets an inspector termination
 * end while idle). Messages to it: `stdout`/`stderr` `{text}`, `result` `{id, data, main}`,
 * `error` `{id?, name, value, traceback}`, `end` `{id, execution_count}` and the synchronous
 * `chdir` `{dir}` (workers cannot chdir themselves; the main thread does it and answers on
 * the sync port).
 */
import { Console } from 'node:console';
import { createRequire, isBuiltin } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import util from 'node:util';
import vm from 'node:vm';
import { parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import { HELPER, transformCell, transpileTypeScript } from './js-transform.mjs';
import { transformCellAcorn } from './js-transform-acorn.mjs';

const KERNEL_DIR = path.dirname(fileURLToPath(import.meta.url));
const DISPLAY = Symbol.for('Jupyter.display');
const post = (msg) => parentPort.postMessage(msg);
const kernelRequire = createRequire(import.meta.url);
const language = workerData.typescript ? 'typescript' : 'javascript';

/** The first of `places` that loads, or `{missing}` saying what was tried. */
function loadFirst(what, places) {
  const tried = [];
  for (const where of places) {
    if (!where) continue;
    try {
      return { module: kernelRequire(where) };
    } catch (err) {
      tried.push(`${where}: ${err.code ?? err.message}`);
    }
  }
  return { missing: `${what} was not found (${tried.join('; ')})` };
}

/**
 * The cell transform: JavaScript with Debian's node-acorn (what nodejs depends on) unless
 * `--parser=typescript`, else with the TypeScript compiler (Debian's node-typescript, or the
 * module given with --typescript-module), which TypeScript cells always need. Loaded once.
 */
function loadTransform() {
  const ts = () =>
    loadFirst('the TypeScript compiler', [workerData.typescriptModule, '/usr/share/nodejs/typescript', 'typescript']);
  if (language === 'javascript' && workerData.parser !== 'typescript') {
    const acorn = loadFirst('acorn', [workerData.acornModule, '/usr/share/nodejs/acorn', 'acorn']);
    if (acorn.module) return { run: (code) => transformCellAcorn(acorn.module, code) };
  }
  const t = ts();
  if (!t.module) return { missing: t.missing };
  if (language === 'typescript') {
    return { run: (code) => transformCell(t.module, transpileTypeScript(t.module, code)) };
  }
  return { run: (code) => transformCell(t.module, code) };
}
const transform = loadTransform();

// --- Output: everything user code prints becomes stdout/stderr events. ---
for (const [name, stream] of [
  ['stdout', process.stdout],
  ['stderr', process.stderr],
]) {
  stream.write = (chunk, encoding, cb) => {
    const text =
      typeof chunk === 'string'
        ? chunk
        : Buffer.from(chunk.buffer ?? chunk, chunk.byteOffset, chunk.byteLength).toString('utf8');
    if (text !== '') post({ type: name, text });
    const done = typeof encoding === 'function' ? encoding : cb;
    if (typeof done === 'function') process.nextTick(done);
    return true;
  };
}
globalThis.console = new Console({
  stdout: process.stdout,
  stderr: process.stderr,
  colorMode: false,
});

// --- chdir through the main thread (synchronous, as process.chdir is). ---
process.chdir = (dir) => {
  const { syncFlag, syncPort } = workerData;
  Atomics.store(syncFlag, 0, 0);
  post({ type: 'chdir', dir: path.resolve(String(dir)) });
  Atomics.wait(syncFlag, 0, 0, 10_000);
  const reply = receiveMessageOnPort(syncPort)?.message;
  if (!reply?.ok) {
    const err = new Error(reply?.message ?? `chdir ${dir}: no answer`);
    if (reply?.code) err.code = reply.code;
    throw err;
  }
};

// --- Module loading relative to the current directory. ---
function cwdRequire() {
  return createRequire(path.join(process.cwd(), '[cell]'));
}
/** `import(spec)` for cells: relative paths from the cwd, bare names as `require` finds them. */
async function importFrom(spec, options) {
  const s = String(spec);
  if (s.startsWith('./') || s.startsWith('../') || s.startsWith('/')) {
    return import(pathToFileURL(path.resolve(process.cwd(), s)).href, options);
  }
  if (/^[a-z][a-z0-9+.-]*:/i.test(s) || isBuiltin(s)) return import(s, options);
  let resolved = null;
  try {
    resolved = cwdRequire().resolve(s);
  } catch {
    /* ESM-only packages or global modules: let import() resolve it */
  }
  if (resolved && !isBuiltin(resolved)) return import(pathToFileURL(resolved).href, options);
  return import(s, options);
}
const cellRequire = (id) => cwdRequire()(id);
cellRequire.resolve = (id, o) => cwdRequire().resolve(id, o);
cellRequire.cache = kernelRequire.cache;
globalThis.require = cellRequire;

// --- Rich results. ---
/** A displayable object: as the last expression or given to display(), it shows as `bundle`. */
function rich(bundle) {
  return { [DISPLAY]: () => bundle };
}
function base64(bytes) {
  return typeof bytes === 'string' ? bytes : Buffer.from(bytes).toString('base64');
}

function isPlainJson(value) {
  if (value === null || typeof value !== 'object') return false;
  if (Array.isArray(value)) return true;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** The MIME bundle of a value: its own display bundle, or text/plain (+ application/json). */
export function bundleOf(value) {
  const own = value?.[DISPLAY];
  if (typeof own === 'function') {
    const b = own.call(value);
    if (b && typeof b === 'object') return { ...b };
  }
  const data = { 'text/plain': util.inspect(value, { colors: false }) };
  if (isPlainJson(value)) {
    try {
      data['application/json'] = JSON.parse(JSON.stringify(value));
    } catch {
      /* cycles, BigInt: text only */
    }
  }
  return data;
}

let active = null;
let executionCount = 0;

/** display(value): shows a value (or a rich object) as a result of the running cell, not the main one. */
function display(value) {
  if (!active) return;
  post({ type: 'result', id: active.id, data: bundleOf(value), main: false });
}
display.html = (html) => rich({ 'text/html': String(html) });
display.markdown = (md) => rich({ 'text/markdown': String(md) });
display.svg = (svg) => rich({ 'image/svg+xml': String(svg) });
display.png = (bytes) => rich({ 'image/png': base64(bytes) });
display.jpeg = (bytes) => rich({ 'image/jpeg': base64(bytes) });
display.json = (value) => rich({ 'application/json': value });
display.latex = (tex) => rich({ 'text/latex': String(tex) });
display.mime = (bundle) => rich({ ...bundle });
globalThis.display = display;

Object.defineProperty(globalThis, HELPER, {
  value: Object.freeze({ import: importFrom }),
  enumerable: false,
});

// --- Errors. ---
/** Frames of the worker's message dispatch, below every cell. */
const DISPATCH_FRAME = /node:internal\/(event_target|per_context\/messageport)/;
/** Column offsets of the wrapper on each cell's first line, by cell file name. */
const prefixLengths = new Map();
/**
 * The stack's lines without the kernel's own frames (those after the last cell frame: the
 * kernel's dispatch), first-line columns made the cell's own.
 */
function traceback(stack) {
  if (typeof stack !== 'string') return [];
  let lines = stack.split('\n').filter((line) => !line.includes(KERNEL_DIR) && !DISPATCH_FRAME.test(line));
  const cellFrame = /\b(cell-\d+):(\d+):(\d+)/;
  let last = -1;
  lines.forEach((line, i) => {
    if (i > 0 && cellFrame.test(line)) last = i;
  });
  if (last > 0) lines = lines.slice(0, last + 1);
  return lines.map((line) =>
    line.replace(new RegExp(cellFrame.source, 'g'), (_all, file, row, col) => {
      const shift = row === '1' ? (prefixLengths.get(file) ?? 0) : 0;
      return `${file}:${row}:${Math.max(1, Number(col) - shift)}`;
    }),
  );
}
function errorFields(err) {
  if (err && typeof err === 'object' && 'message' in err) {
    const name = typeof err.name === 'string' && err.name ? err.name : 'Error';
    return { name, value: String(err.message), traceback: traceback(err.stack) };
  }
  return { name: 'Error', value: typeof err === 'string' ? err : util.inspect(err), traceback: [] };
}
/**
 * Reports an error nobody caught (a timer's throw, an unhandled rejection) on the running
 * request. Node 18 calls a worker's uncaughtException listeners twice for one throw: an
 * error already reported (the same object, or the same primitive in the same turn) is not
 * reported again.
 */
const reported = new WeakSet();
let reportedPrimitive = null;
function reportUncaught(err) {
  if (err !== null && (typeof err === 'object' || typeof err === 'function')) {
    if (reported.has(err)) return;
    reported.add(err);
  } else {
    if (reportedPrimitive && reportedPrimitive.value === err) return;
    reportedPrimitive = { value: err };
    setImmediate(() => {
      reportedPrimitive = null;
    });
  }
  post({ type: 'error', id: active?.id, ...errorFields(err) });
}
process.on('uncaughtException', reportUncaught);
process.on('unhandledRejection', reportUncaught);

// --- Cells. ---
async function run({ id, code, preError }) {
  executionCount++;
  const token = { id };
  active = token;
  try {
    if (preError) {
      post({ type: 'error', id, name: preError.name, value: preError.value, traceback: [] });
    } else if (transform.missing) {
      post({ type: 'error', id, name: 'KernelError', value: transform.missing, traceback: [] });
    } else {
      const { source, prefixLength } = transform.run(code);
      const filename = `cell-${executionCount}`;
      prefixLengths.set(filename, prefixLength);
      const fn = vm.runInThisContext(source, { filename });
      const out = await fn.call(globalThis);
      if (active !== token) return;
      if (out && out.value !== undefined) {
        post({ type: 'result', id, data: bundleOf(out.value), main: true });
      }
    }
  } catch (err) {
    if (active !== token) return;
    post({ type: 'error', id, ...errorFields(err) });
  }
  // Lets rejections the cell left unhandled be reported on it.
  await new Promise((resolve) => setImmediate(resolve));
  if (active !== token) return;
  active = null;
  post({ type: 'end', id, execution_count: executionCount });
}

function interrupt(id) {
  if (!active || active.id !== id) return;
  active = null;
  post({ type: 'error', id, name: 'Interrupted', value: 'Execution interrupted', traceback: [] });
  post({ type: 'end', id, execution_count: executionCount });
}

parentPort.on('message', (msg) => {
  if (msg.type === 'run') void run(msg);
  else if (msg.type === 'interrupt') interrupt(msg.id);
});
