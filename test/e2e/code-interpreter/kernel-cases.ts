/**
 * The kernels' protocol contract as test cases, run against kernels on the host
 * (kernels-host.test.ts) and in a sandbox of local/code-interpreter (kernels.test.ts).
 * Each `*Cases` function registers its tests inside the caller's describe; `kernel()` gives
 * the kernel started in the caller's `before` (one kernel for the whole suite: later cases
 * also prove that the state survived the earlier ones, interrupts included).
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { type KernelClient, type KernelEvent, errorOf, mainResult, streamText } from './kernel-driver.js';

/** Asserts the request ended once, last, and returns the events without the end. */
function ended(events: KernelEvent[]): KernelEvent[] {
  assert.equal(events.filter((e) => e.type === 'end').length, 1, JSON.stringify(events));
  assert.equal(events[events.length - 1].type, 'end');
  assert.equal(typeof events[events.length - 1].execution_count, 'number');
  return events.slice(0, -1);
}

function plain(events: KernelEvent[]): unknown {
  return mainResult(events)?.['text/plain'];
}

/** Runs `code` and interrupts the kernel once it printed `marker` on stdout. */
async function runInterrupted(k: KernelClient, code: string, marker: string): Promise<KernelEvent[]> {
  let sent = false;
  let seen = '';
  return k.run(code, {
    onEvent: (ev) => {
      if (ev.type !== 'stdout' || sent) return;
      seen += ev.text;
      if (seen.includes(marker)) {
        sent = true;
        void k.interrupt();
      }
    },
  });
}

export function javascriptCases(kernel: () => KernelClient): void {
  it('keeps top-level const/let/function/class across cells and lets a cell declare them again', async () => {
    const k = kernel();
    const first = ended(
      await k.run('const x = 1; let y = 2\nfunction f() { return x + y }\nclass A { v() { return 3 } }'),
    );
    assert.deepEqual(first, [], 'declarations give no result');
    assert.equal(plain(await k.run('x + y')), '3');
    const again = await k.run('const x = 10; [x, f(), new A().v()]');
    assert.equal(errorOf(again), undefined, JSON.stringify(again));
    assert.equal(plain(again), '[ 10, 12, 3 ]');
    assert.deepEqual(mainResult(again)?.['application/json'], [10, 12, 3]);
  });

  it('imports ES modules (default, named, namespace, dynamic) and has require', async () => {
    const k = kernel();
    const ev = await k.run(
      "import fs from 'node:fs'\nimport { readFileSync } from 'fs'\nimport * as p from 'path'\n" +
        "const os = await import('node:os');\n" +
        '[typeof fs.readFileSync, typeof readFileSync, p.sep, typeof os.cpus, require("path").join("a", "b")].join(" ")',
    );
    assert.equal(errorOf(ev), undefined, JSON.stringify(ev));
    assert.equal(plain(ev), "'function function / function a/b'");
    assert.equal(plain(await k.run('typeof p.join')), "'function'", 'imported bindings persist');
  });

  it('streams stdout and stderr in order with top-level await, then the last value as the main result', async () => {
    const ev = ended(
      await kernel().run(
        "console.log('one'); await new Promise((r) => setTimeout(r, 20)); console.error('two'); process.stdout.write('three\\n'); ({ a: 1, b: [true, null] })",
      ),
    );
    assert.deepEqual(
      ev.map((e) => [e.type, e.text ?? e.main]),
      [
        ['stdout', 'one\n'],
        ['stderr', 'two\n'],
        ['stdout', 'three\n'],
        ['result', true],
      ],
    );
    assert.deepEqual(ev[3].data, {
      'text/plain': '{ a: 1, b: [ true, null ] }',
      'application/json': { a: 1, b: [true, null] },
    });
  });

  it('gives no result for undefined, text/plain for strings, display() outputs that are not the main one', async () => {
    const k = kernel();
    assert.deepEqual(ended(await k.run('undefined')), []);
    assert.deepEqual(ended(await k.run('let u; u')), []);
    assert.deepEqual(mainResult(await k.run("'s'")), { 'text/plain': "'s'" });
    const ev = ended(await k.run("display(display.html('<b>hi</b>')); display({ n: 1 }); 7"));
    assert.deepEqual(
      ev.map((e) => [e.main, e.data]),
      [
        [false, { 'text/html': '<b>hi</b>' }],
        [false, { 'text/plain': '{ n: 1 }', 'application/json': { n: 1 } }],
        [true, { 'text/plain': '7' }],
      ],
    );
  });

  it('reports thrown errors and rejected awaits with name, value and the cell lines of the stack', async () => {
    const k = kernel();
    const thrown = ended(await k.run("function boom() {\n  throw new TypeError('bad thing')\n}\nboom()"));
    assert.equal(thrown.length, 1);
    const err = errorOf(thrown);
    assert.equal(err?.name, 'TypeError');
    assert.equal(err?.value, 'bad thing');
    assert.equal(err?.traceback?.[0], 'TypeError: bad thing');
    assert.ok(
      err?.traceback?.some((l) => /at boom \(cell-\d+:2:\d+\)/.test(l)),
      `a frame at the throwing line: ${err?.traceback}`,
    );
    assert.ok(!err?.traceback?.some((l) => l.includes('js-kernel')), 'no kernel frames');
    const rejected = errorOf(await k.run("await Promise.reject(new RangeError('nope'))"));
    assert.deepEqual([rejected?.name, rejected?.value], ['RangeError', 'nope']);
    const syntax = errorOf(await k.run('const z = ;'));
    assert.equal(syntax?.name, 'SyntaxError');
    const unhandled = await k.run("Promise.reject(new Error('nobody awaits me')); 5");
    assert.equal(plain(unhandled), '5');
    assert.equal(errorOf(unhandled)?.value, 'nobody awaits me', 'an unhandled rejection is reported on its request');
    const timer = ended(
      await k.run(
        "setTimeout(() => { throw new Error('from a timer') }, 1); await new Promise((r) => setTimeout(r, 50)); 'after'",
      ),
    );
    assert.deepEqual(
      timer.map((e) => [e.type, e.value ?? e.data?.['text/plain']]),
      [
        ['error', 'from a timer'],
        ['result', "'after'"],
      ],
      'a timer that throws while its cell runs: reported once, on that request',
    );
    assert.equal(plain(await k.run('1 + 1')), '2', 'the kernel goes on');
  });

  it('applies env only for its request and honours cwd', async () => {
    const k = kernel();
    const ev = await k.run('[process.env.KERNEL_T_A, process.env.HOME]', {
      env: { KERNEL_T_A: 'a b', HOME: '/nowhere' },
    });
    assert.deepEqual(mainResult(ev)?.['application/json'], ['a b', '/nowhere']);
    const after = await k.run("[process.env.KERNEL_T_A === undefined, process.env.HOME !== '/nowhere']");
    assert.deepEqual(mainResult(after)?.['application/json'], [true, true]);
    assert.equal(plain(await k.run('process.cwd()', { cwd: '/tmp' })), "'/tmp'");
    assert.equal(plain(await k.run('process.cwd()')), "'/tmp'", 'the cwd stays');
    assert.equal(plain(await k.run("process.chdir('/'); process.cwd()")), "'/'", 'process.chdir works in a cell');
    const bad = errorOf(await k.run('1', { cwd: '/no/such/dir' }));
    assert.ok(bad, 'a cwd that does not exist is an error');
  });

  it('interrupts a busy loop and an awaiting cell; the kernel keeps its state', async () => {
    const k = kernel();
    const busy = ended(
      await runInterrupted(k, "globalThis.spins = 0; console.log('spinning'); while (true) { spins++ }", 'spinning'),
    );
    assert.deepEqual(
      busy.filter((e) => e.type === 'error').map((e) => e.name),
      ['Interrupted'],
    );
    assert.equal(plain(await k.run('spins > 0 && x === 10')), 'true');
    const waiting = ended(
      await runInterrupted(
        k,
        "console.log('waiting'); await new Promise((r) => setTimeout(r, 600_000)); 'never'",
        'waiting',
      ),
    );
    assert.equal(errorOf(waiting)?.name, 'Interrupted');
    assert.equal(mainResult(waiting), undefined);
    const later = ended(await runInterrupted(k, "await null; console.log('late spin'); while (true) {}", 'late spin'));
    assert.equal(errorOf(later)?.name, 'Interrupted', 'a busy loop after an await');
    assert.equal(plain(await k.run("'alive'")), "'alive'");
    assert.deepEqual(k.stray, [], 'the kernel printed nothing but events');
  });
}

export function typescriptCases(kernel: () => KernelClient): void {
  it('runs TypeScript: interfaces, types, enums, generics, import type, top-level await; types are not checked', async () => {
    const k = kernel();
    const first = await k.run(
      'interface P { x: number; y?: string }\ntype T = number | string\nenum Color { Red, Green = 5 }\n' +
        'const p: P = { x: 1 }\nfunction add(a: number, b: number): number { return a + b }\nadd(p.x, Color.Green)',
    );
    assert.equal(errorOf(first), undefined, JSON.stringify(first));
    assert.equal(plain(first), '6');
    const second = await k.run(
      "import { join } from 'node:path'\nimport type { Stats } from 'node:fs'\nconst s: Stats | null = null\n" +
        'class Box<V> { constructor(public v: V) {} }\n' +
        'join(String(new Box<number>(Color.Red).v), String(await Promise.resolve(add(1, 1))))',
    );
    assert.equal(errorOf(second), undefined, JSON.stringify(second));
    assert.equal(plain(second), "'0/2'");
    const untyped = await k.run("const wrong: number = 'a string' as unknown as number; wrong");
    assert.equal(plain(untyped), "'a string'");
    assert.equal(errorOf(await k.run('let q: = 1'))?.name, 'SyntaxError');
    assert.equal(plain(await k.run('p.x + Color.Green')), '6', 'state persists');
    assert.deepEqual(k.stray, []);
  });
}

export function bashCases(kernel: () => KernelClient): void {
  it('keeps cd, variables, functions and exports across cells', async () => {
    const k = kernel();
    assert.deepEqual(
      ended(await k.run('cd /tmp\nX=42\nf() { echo "f:$1"; }\nexport Y=exported\necho hello')).map((e) => e.text),
      ['hello\n'],
    );
    const ev = await k.run("pwd; echo $X; f arg; bash -c 'echo $Y'");
    assert.equal(streamText(ev), '/tmp\n42\nf:arg\nexported\n');
    assert.equal(errorOf(ev), undefined);
  });

  it('streams stderr apart from stdout; heredocs and output without a final newline', async () => {
    const k = kernel();
    const ev = await k.run('echo out; echo err >&2\ncat <<EOF\nheredoc $X\nEOF\nprintf "no newline"');
    assert.equal(streamText(ev), 'out\nheredoc 42\nno newline');
    assert.equal(streamText(ev, 'stderr'), 'err\n');
  });

  it('reports a non-zero exit status as an ExitCode error', async () => {
    const k = kernel();
    const ev = ended(await k.run('echo a; (exit 3)'));
    assert.equal(streamText(ev), 'a\n');
    assert.deepEqual(
      ev.filter((e) => e.type === 'error').map((e) => [e.name, e.value]),
      [['ExitCode', '3']],
    );
    assert.equal(errorOf(await k.run('false; true')), undefined, 'only the last status counts');
  });

  it('survives set -e: the cell stops at the failure, the shell and its state stay', async () => {
    const k = kernel();
    const ev = await k.run('set -e\necho before\nfalse\necho after');
    assert.equal(streamText(ev), 'before\n');
    assert.equal(errorOf(ev)?.name, 'ExitCode');
    const next = await k.run('echo "alive $X"; false; echo "errexit off: $-"');
    assert.match(streamText(next), /^alive 42\nerrexit off: [^e]*\n$/);
  });

  it('gives EOF to commands reading stdin', async () => {
    const ev = await kernel().run('cat; read -r line; echo "read status $?"');
    assert.equal(streamText(ev), 'read status 1\n');
  });

  it('interrupts a running command and a shell loop; the shell stays', async () => {
    const k = kernel();
    const sleeping = ended(await runInterrupted(k, 'echo started; sleep 600; echo after', 'started'));
    assert.equal(errorOf(sleeping)?.name, 'Interrupted');
    assert.ok(!streamText(sleeping).includes('after'), 'the rest of the cell does not run');
    const looping = ended(await runInterrupted(k, 'echo looping; while true; do :; done', 'looping'));
    assert.equal(errorOf(looping)?.name, 'Interrupted');
    assert.equal(streamText(await k.run('echo "still $X"; pwd')), 'still 42\n/tmp\n');
  });

  it('applies env only for its request and honours cwd', async () => {
    const k = kernel();
    assert.equal(
      streamText(await k.run('echo "$KERNEL_T_A|$HOME"', { env: { KERNEL_T_A: "it's 'quoted'", HOME: '/nowhere' } })),
      "it's 'quoted'|/nowhere\n",
    );
    const after = streamText(await k.run('[[ -v KERNEL_T_A ]] && echo set || echo unset; echo "$HOME"'));
    assert.match(after, /^unset\n(?!\/nowhere\n)/);
    assert.equal(streamText(await k.run('pwd', { cwd: '/' })), '/\n');
    assert.equal(streamText(await k.run('pwd')), '/\n', 'the cwd stays');
  });

  it('starts a new shell after exit', async () => {
    const k = kernel();
    const ev = await k.run('exit 4');
    assert.deepEqual([errorOf(ev)?.name, errorOf(ev)?.value], ['ExitCode', '4']);
    assert.equal(streamText(await k.run('echo "new [$X]"')), 'new []\n');
    assert.deepEqual(k.stray, []);
  });
}
