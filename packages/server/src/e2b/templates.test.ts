import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { type BuildLogEvent, SandboxdError } from '@sandboxd/protocol';
import { Template, waitForPort } from 'e2b';
import type { LightMyRequestResponse } from 'fastify';
import { makeTestApp, type TestApp } from '../../test/app.js';
import type { BuildPlan, CopyStep, RunStep, Step } from '../builds/plan.js';
import type { BuildRecord, BuildsApi, TemplateRecord } from '../builds/types.js';
import { DEFAULT_E2B_TEMPLATES } from '../config.js';
import type { AccountRecord } from '../store/store.js';
import { accountTemplateOf } from './create.js';
import {
  CREATE_USER_SCRIPT,
  copyBaseOf,
  MAKE_WORKDIR_SCRIPT,
  e2bReasonOf,
  e2bStatusOf,
  parseTemplateName,
  READY_CMD_LABEL,
  requestedNameAndTags,
  runArgv,
  START_CMD_LABEL,
  shellLabel,
  type TemplateBuildStart,
  TemplateCompiler,
} from './templates.js';
import { AccessTokens } from './tokens.js';

/*
 * E2B's template builder door: the compiler of E2B's steps into a BuildPlan (also from what
 * the real `e2b` SDK serializes), names and tags, the status mapping, and the routes over a
 * fake builds service (test/e2e/e2b-templates.test.ts runs the SDK against the real one).
 */

const HASH = 'a'.repeat(64);
const HASH2 = 'b'.repeat(64);
const compiler = new TemplateCompiler(DEFAULT_E2B_TEMPLATES);
const compile = (b: TemplateBuildStart) => compiler.compile(b);
const stepsOf = (p: BuildPlan): Step[] => p.stages[0].steps;

function throwsKind(fn: () => unknown, kind: string, text?: string | RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof SandboxdError, String(e));
    assert.equal(e.kind, kind, e.message);
    if (typeof text === 'string') assert.ok(e.message.includes(text), `${e.message} should include ${text}`);
    else if (text) assert.match(e.message, text);
    return true;
  });
}

describe('E2B template names and tags', () => {
  it('name, name:tag; lowercased and trimmed; default is latest; namespaces and bad names refused', () => {
    assert.deepEqual(parseTemplateName('my-tpl'), { name: 'my-tpl', tag: undefined });
    assert.deepEqual(parseTemplateName(' My-Tpl:V1.2 '), { name: 'my-tpl', tag: 'v1.2' });
    assert.deepEqual(parseTemplateName('x:default'), { name: 'x', tag: 'latest' });
    throwsKind(() => parseTemplateName('team/x'), 'validation', 'namespaces');
    throwsKind(() => parseTemplateName('-x'), 'validation', 'not a name');
    throwsKind(() => parseTemplateName('x:.bad'), 'validation', 'not a tag');
    throwsKind(() => parseTemplateName('x:a:b'), 'validation', 'not a tag');
  });

  it('the request: the name tag first, then tags, deduplicated; none is latest; a server template name is refused', () => {
    const c = DEFAULT_E2B_TEMPLATES;
    assert.deepEqual(requestedNameAndTags({ name: 'app' }, c), { name: 'app', tags: ['latest'] });
    assert.deepEqual(requestedNameAndTags({ name: 'app:v2', tags: ['prod', 'V2', 'default'] }, c), {
      name: 'app',
      tags: ['v2', 'prod', 'latest'],
    });
    assert.deepEqual(requestedNameAndTags({ alias: 'old' }, c), { name: 'old', tags: ['latest'] });
    throwsKind(() => requestedNameAndTags({}, c), 'validation', 'name is required');
    throwsKind(() => requestedNameAndTags({ name: 'base' }, c), 'conflict', "this server's E2B templates");
    throwsKind(() => requestedNameAndTags({ name: 'x', tags: ['-no'] }, c), 'validation', 'not a tag');
  });

  it('a create names an account template as name or name:tag (default: latest)', () => {
    assert.deepEqual(accountTemplateOf('mine'), { name: 'mine', tag: 'latest' });
    assert.deepEqual(accountTemplateOf('mine:v1'), { name: 'mine', tag: 'v1' });
    assert.deepEqual(accountTemplateOf('mine:default'), { name: 'mine', tag: 'latest' });
    assert.equal(accountTemplateOf('local/busybox:latest'), null);
    assert.equal(accountTemplateOf('Upper'), null);
  });
});

describe("E2B's steps compiled into a BuildPlan", () => {
  it("E2B's base (Template() / fromBaseImage) is the Debian image, steps as `user` in /home/user", () => {
    const { plan } = compile({ fromImage: 'e2bdev/base', steps: [] });
    assert.deepEqual(plan.stages[0].base, { kind: 'image', ref: 'local/debian:bookworm' });
    assert.deepEqual(stepsOf(plan), [
      {
        kind: 'config',
        line: 1,
        text: 'FROM e2bdev/base (user user, workdir /home/user)',
        set: { user: 'user', workingDir: '/home/user' },
      },
    ]);
    assert.equal(compile({ fromImage: 'docker.io/e2bdev/base:latest' }).plan.stages[0].base.kind, 'image');
    const ci = compile({ fromTemplate: 'code-interpreter-v1' }).plan;
    assert.deepEqual(ci.stages[0].base, { kind: 'image', ref: 'local/code-interpreter:latest' });
  });

  it('another image is taken as it is, with its own user; an account template is checked before the build', () => {
    const c = compile({ fromImage: 'local/busybox:latest', steps: [] });
    assert.deepEqual(c.plan, {
      stages: [{ line: 1, base: { kind: 'image', ref: 'local/busybox:latest' }, steps: [] }],
      target: 0,
    });
    assert.equal(c.baseTemplate, undefined);
    const t = compile({ fromTemplate: 'Mine:v2' });
    assert.deepEqual(t.plan.stages[0].base, { kind: 'image', ref: 'templates/mine:v2' });
    assert.deepEqual(t.baseTemplate, { name: 'mine', tag: 'v2' });
    assert.deepEqual(compile({ fromTemplate: 'mine' }).baseTemplate, { name: 'mine', tag: 'latest' });
  });

  it('bases it cannot take: both, neither, registry credentials, a bad reference', () => {
    throwsKind(() => compile({ fromImage: 'a', fromTemplate: 'b' }), 'validation', 'not both');
    throwsKind(() => compile({}), 'validation', 'fromImage or fromTemplate is required');
    throwsKind(
      () => compile({ fromImage: 'x', fromImageRegistry: { type: 'registry', username: 'u', password: 'p' } }),
      'unsupported',
      'registry credentials',
    );
    throwsKind(() => compile({ fromImage: 'a b' }), 'validation', 'not an image reference');
    throwsKind(() => compile({ fromTemplate: 'team/x' }), 'validation', 'namespaces');
  });

  it('RUN: through bash -l as E2B runs it (sh without bash); a RUN user applies to that step only', () => {
    const s = stepsOf(
      compile({
        fromImage: 'local/busybox:latest',
        steps: [
          { type: 'RUN', args: ['echo one && echo two'] },
          { type: 'run', args: ['id -u', 'root'] },
          { type: 'RUN', args: ['true', ''] },
        ],
      }).plan,
    );
    assert.deepEqual(s[0], {
      kind: 'run',
      line: 1,
      text: 'RUN echo one && echo two',
      argv: runArgv('echo one && echo two'),
      args: {},
    });
    assert.deepEqual(runArgv('x').slice(-2), ['sh', 'x']);
    assert.deepEqual(
      s.slice(1, 4).map((x) => [x.kind, x.line, x.kind === 'config' ? x.set : (x as RunStep).argv.at(-1)]),
      [
        ['config', 2, { user: 'root' }],
        ['run', 2, 'id -u'],
        ['config', 2, { user: '' }],
      ],
    );
    assert.equal(s[4].kind, 'run');
    assert.equal(s.length, 5);
  });

  it('COPY: the upload, its base dir as E2B splits globs, dest from the workdir, owner the current user', () => {
    const c = compile({
      fromImage: 'e2bdev/base',
      steps: [
        { type: 'COPY', args: ['app.py', 'srv/', '', ''], filesHash: HASH },
        { type: 'COPY', args: ['src/**/*.js', '/opt/js', 'root', '0755'], filesHash: HASH2 },
        { type: 'WORKDIR', args: ['/work'] },
        { type: 'COPY', args: ['.', '.'], filesHash: HASH },
        { type: 'COPY', args: ['*.txt', '~/t/'], filesHash: HASH },
      ],
    });
    const copies = stepsOf(c.plan).filter((x): x is CopyStep => x.kind === 'copy');
    assert.deepEqual(copies[0], {
      kind: 'copy',
      line: 1,
      text: 'COPY app.py srv/',
      from: { kind: 'upload', hash: HASH },
      sources: ['app.py'],
      dest: '/home/user/srv/',
      chown: 'user',
    });
    assert.deepEqual(
      copies.slice(1).map((x) => [x.sources, x.dest, x.chown, x.chmod]),
      [
        [['src'], '/opt/js', 'root', 0o755],
        [['.'], '/work', 'user', undefined],
        [['.'], '/home/user/t/', 'user', undefined],
      ],
    );
    assert.deepEqual(c.uploads, [HASH, HASH2]);
  });

  it('copyBaseOf: E2B strips the glob part (doublestar SplitPattern of src/)', () => {
    assert.equal(copyBaseOf('file.txt'), 'file.txt');
    assert.equal(copyBaseOf('dir/'), 'dir');
    assert.equal(copyBaseOf('a/b/*.txt'), 'a/b');
    assert.equal(copyBaseOf('*.txt'), '.');
    assert.equal(copyBaseOf('.'), '.');
    assert.equal(copyBaseOf('./x/../y'), 'y');
    assert.equal(copyBaseOf('a/[ab]/c'), 'a');
    assert.equal(copyBaseOf('a\\*b/c'), 'a*b/c');
  });

  it('COPY refusals name the step: no hash, outside the context, bad owner or mode', () => {
    const one = (args: string[], filesHash: string | null = HASH) =>
      compile({
        fromImage: 'x',
        steps: [
          { type: 'RUN', args: ['true'] },
          { type: 'COPY', args, filesHash },
        ],
      });
    throwsKind(() => one(['a', '/b'], null), 'validation', 'step 2 (COPY a): filesHash');
    throwsKind(() => one(['a', '/b'], 'not/a/hash'), 'validation', 'filesHash');
    throwsKind(() => one(['/etc/passwd', '/b']), 'validation', 'relative to the context');
    throwsKind(() => one(['../x', '/b']), 'validation', 'outside the context');
    throwsKind(() => one(['a/../../x', '/b']), 'validation', 'outside the context');
    throwsKind(() => one(['a', '/b', 'x;rm -rf /']), 'validation', 'is not a user');
    throwsKind(() => one(['a', '/b', '', '999']), 'validation', 'octal');
    throwsKind(() => one(['a']), 'validation', 'step 2 (COPY)');
  });

  it('ENV, WORKDIR and USER: config steps; USER makes a missing user first, as root', () => {
    const s = stepsOf(
      compile({
        fromImage: 'local/busybox:latest',
        steps: [
          { type: 'ENV', args: ['A', '1', 'B', 'x y'] },
          { type: 'WORKDIR', args: ['/app/'] },
          { type: 'WORKDIR', args: ['sub'] },
          { type: 'USER', args: ['root'] },
          { type: 'USER', args: ['app'] },
          { type: 'USER', args: ['1000:1000'] },
        ],
      }).plan,
    );
    assert.deepEqual(s[0], { kind: 'config', line: 1, text: 'ENV A B', set: { env: { A: '1', B: 'x y' } } });
    assert.deepEqual(
      s.slice(1, 3).map((x) => x.kind === 'workdir' && x.path),
      ['/app', '/app/sub'],
    );
    assert.deepEqual(s[3], { kind: 'config', line: 4, text: 'USER root', set: { user: 'root' } });
    assert.deepEqual(
      s.slice(4, 7).map((x) => [x.kind, x.line, x.kind === 'config' ? x.set : (x as RunStep).argv.slice(2)]),
      [
        ['config', 5, { user: 'root' }],
        ['run', 5, [CREATE_USER_SCRIPT, 'sh', 'app', 'false']],
        ['config', 5, { user: 'app' }],
      ],
    );
    assert.deepEqual(s.slice(7), [{ kind: 'config', line: 6, text: 'USER 1000:1000', set: { user: '1000:1000' } }]);
  });

  it('refusals before anything runs: unknown step types and bad arguments name the step', () => {
    const one = (step: TemplateBuildStart['steps']) => compile({ fromImage: 'x', steps: step });
    throwsKind(
      () =>
        one([
          { type: 'RUN', args: ['true'] },
          { type: 'HEALTHCHECK', args: [] },
        ]),
      'validation',
      "step 2: E2B step type 'HEALTHCHECK' is not supported",
    );
    throwsKind(() => one([{ type: 'RUN', args: [] }]), 'validation', 'step 1 (RUN)');
    throwsKind(() => one([{ type: 'RUN', args: ['  '] }]), 'validation', 'empty');
    throwsKind(() => one([{ type: 'RUN', args: ['x', 'not a user'] }]), 'validation', 'not a user');
    throwsKind(() => one([{ type: 'RUN', args: ['a\0b'] }]), 'validation', 'NUL');
    throwsKind(() => one([{ type: 'ENV', args: ['A'] }]), 'validation', 'pairs');
    throwsKind(() => one([{ type: 'ENV', args: ['A=B', '1'] }]), 'validation', 'not a variable name');
    throwsKind(() => one([{ type: 'WORKDIR', args: [] }]), 'validation', 'step 1 (WORKDIR)');
    throwsKind(() => one([{ type: 'WORKDIR', args: ['~/x'] }]), 'validation', 'no home');
    throwsKind(() => one([{ type: 'USER', args: ['$(id)'] }]), 'validation', 'not a user');
    throwsKind(() => one([{ type: 'USER', args: ['u', 'maybe'] }]), 'validation', 'sudo flag');
  });

  it("WORKDIR as a user: made by root if missing and handed to the user (as E2B's is the user's); the home is there", () => {
    const s = stepsOf(
      compile({
        fromImage: 'e2bdev/base',
        steps: [
          { type: 'WORKDIR', args: ['/srv/app'] },
          { type: 'WORKDIR', args: ['~'] },
          { type: 'USER', args: ['root'] },
          { type: 'WORKDIR', args: ['/opt'] },
        ],
      }).plan,
    );
    assert.deepEqual(
      s
        .slice(1)
        .map((x) => [
          x.kind,
          x.line,
          x.kind === 'config' ? x.set : x.kind === 'run' ? x.argv.slice(2) : (x as { path?: string }).path,
        ]),
      [
        ['config', 1, { user: 'root' }],
        ['run', 1, [MAKE_WORKDIR_SCRIPT, 'sh', '/srv/app', 'user']],
        ['config', 1, { user: 'user', workingDir: '/srv/app' }],
        ['config', 2, { workingDir: '/home/user' }],
        ['config', 3, { user: 'root' }],
        ['workdir', 4, '/opt'],
      ],
    );
  });

  it('start and ready commands become the labels the runtime reads; force (build or step) is noCache', () => {
    const c = compile({
      fromImage: 'x',
      steps: [{ type: 'RUN', args: ['true'] }],
      startCmd: 'srv',
      readyCmd: 'test -f /r',
    });
    assert.deepEqual(stepsOf(c.plan).at(-1), {
      kind: 'config',
      line: 1,
      text: 'START srv (ready: test -f /r)',
      set: { labels: { [START_CMD_LABEL]: shellLabel('srv'), [READY_CMD_LABEL]: shellLabel('test -f /r') } },
    });
    assert.equal(c.noCache, false);
    assert.equal(compile({ fromImage: 'x', force: true }).noCache, true);
    assert.equal(compile({ fromImage: 'x', steps: [{ type: 'RUN', args: ['a'], force: true }] }).noCache, true);
    assert.equal(stepsOf(compile({ fromImage: 'x', startCmd: null, readyCmd: null }).plan).length, 0);
  });

  it("shellLabel: the runtime's sh -c runs the command through bash -l (sh without), quoted once", async () => {
    const { execFileSync } = await import('node:child_process');
    const cmd = `echo "it's $((1+1))" 'a b'`;
    const label = shellLabel(cmd);
    assert.equal(execFileSync('/bin/sh', ['-c', label]).toString(), "it's 2 a b\n");
    assert.equal(
      execFileSync('/bin/sh', ['-c', shellLabel('echo $0')])
        .toString()
        .trim()
        .endsWith('bash'),
      true,
    );
    assert.ok(shellLabel("'".repeat(16_000)).length < 65_536, 'within the runtime label bound');
  });

  describe('what the real e2b SDK sends', () => {
    let dir: string;
    before(() => {
      dir = mkdtempSync(join(tmpdir(), 'sandboxd-e2b-tpl-'));
      mkdirSync(join(dir, 'app', 'lib'), { recursive: true });
      writeFileSync(join(dir, 'app', 'main.py'), 'print(1)\n');
      writeFileSync(join(dir, 'app', 'lib', 'x.py'), 'x = 1\n');
      writeFileSync(join(dir, 'notes.txt'), 'n\n');
    });
    after(() => rmSync(dir, { recursive: true, force: true }));

    it('a builder chain: every method E2B has a step for compiles, with the SDK hashes', async () => {
      const t = Template({ fileContextPath: dir })
        .fromImage('local/busybox:latest')
        .copy('app', '/srv/app')
        .copy('*.txt', '/srv/', { user: 'root', mode: 0o644 })
        .runCmd(['echo a', 'echo b'])
        .runCmd('id', { user: 'root' })
        .setWorkdir('/srv')
        .setUser('app')
        .setEnvs({ GREETING: 'hi there', EMPTY: '' })
        .makeDir('/srv/data')
        .remove('/tmp/x', { force: true })
        .skipCache()
        .runCmd('date')
        .setStartCmd('httpd -f -p 8000', waitForPort(8000));
      const body = JSON.parse(await Template.toJSON(t)) as TemplateBuildStart;
      const c = compile(body);
      assert.equal(c.noCache, true, 'skipCache: what follows is forced');
      const s = stepsOf(c.plan);
      const kinds = s.map((x) => x.kind);
      assert.deepEqual(kinds, [
        'copy',
        'copy',
        'run',
        'config',
        'run',
        'config',
        'workdir',
        'config',
        'run',
        'config',
        'config',
        'run',
        'run',
        'run',
        'config',
      ]);
      const copies = s.filter((x): x is CopyStep => x.kind === 'copy');
      assert.deepEqual(
        copies.map((x) => [x.sources, x.dest, x.chown ?? null, x.chmod ?? null]),
        [
          [['app'], '/srv/app', null, null],
          [['.'], '/srv/', 'root', 0o644],
        ],
      );
      assert.equal(c.uploads.length, 2);
      for (const h of c.uploads) assert.match(h, /^[0-9a-f]{64}$/);
      assert.equal((s[2] as RunStep).argv.at(-1), 'echo a && echo b');
      assert.deepEqual(s.at(-1), {
        kind: 'config',
        line: body.steps?.length,
        text: `START httpd -f -p 8000 (ready: ${waitForPort(8000).getCmd()})`,
        set: {
          labels: {
            [START_CMD_LABEL]: shellLabel('httpd -f -p 8000'),
            [READY_CMD_LABEL]: shellLabel(waitForPort(8000).getCmd()),
          },
        },
      });
    });

    it('fromDockerfile: the SDK turns it into steps (USER root, WORKDIR /, ..., USER user, WORKDIR /home/user)', async () => {
      const t = Template({ fileContextPath: dir }).fromDockerfile(
        'FROM local/debian:bookworm\nENV A=1\nCOPY notes.txt /n/\nRUN echo hi > /hi\nCMD ["sleep", "infinity"]\n',
      );
      const c = compile(JSON.parse(await Template.toJSON(t)) as TemplateBuildStart);
      assert.deepEqual(c.plan.stages[0].base, { kind: 'image', ref: 'local/debian:bookworm' });
      const s = stepsOf(c.plan);
      assert.deepEqual(
        s.map((x) => x.text),
        [
          'USER root',
          'WORKDIR /',
          'ENV A',
          'COPY notes.txt /n/',
          'RUN echo hi > /hi',
          'USER root (to create user)',
          'USER user',
          'USER user',
          'WORKDIR /home/user',
          'START sleep infinity (ready: sleep 20)',
        ],
      );
    });
  });
});

describe('E2B build status from a build', () => {
  const rec = (o: Partial<BuildRecord>): BuildRecord => ({
    id: 'bld_1',
    accountId: 'a',
    name: 'n',
    tag: 'latest',
    extraTags: [],
    state: 'queued',
    source: 'e2b',
    createdAt: 0,
    stepsTotal: 0,
    stepsDone: 0,
    stepsCached: 0,
    ...o,
  });

  it('states: queued is waiting, cancelled an error', () => {
    assert.deepEqual(
      (['queued', 'building', 'ready', 'error', 'cancelled'] as const).map((state) => e2bStatusOf({ state })),
      ['waiting', 'building', 'ready', 'error', 'error'],
    );
  });

  it("the reason names E2B's step: the step's index from 1, `base` for the base image; output as entries", () => {
    const failed = rec({
      state: 'error',
      finishedAt: Date.UTC(2030, 0, 1),
      error: {
        code: 400,
        kind: 'validation',
        message: 'step 3 (RUN false) failed: exit code 1',
        details: { step: 5, line: 3, instruction: 'RUN false', exitCode: 1, output: 'oops\nmore\n' },
      },
    });
    assert.deepEqual(e2bReasonOf(failed), {
      message: 'step 3 (RUN false) failed: exit code 1',
      step: '3',
      logEntries: [
        { timestamp: '2030-01-01T00:00:00.000Z', level: 'error', message: 'oops' },
        { timestamp: '2030-01-01T00:00:00.000Z', level: 'error', message: 'more' },
      ],
    });
    const base = rec({
      state: 'error',
      error: {
        code: 404,
        kind: 'template_not_found',
        message: 'no image x',
        details: { line: 1, instruction: 'FROM x' },
      },
    });
    assert.equal(e2bReasonOf(base)?.step, 'base');
    const numbered = rec({
      state: 'error',
      error: { code: 400, kind: 'validation', message: 'Step 7 (line 4) failed: RUN x: exit 1', details: { line: 4 } },
    });
    assert.equal(e2bReasonOf(numbered)?.message, 'Step 4 failed: RUN x: exit 1', "E2B's step number");
    assert.equal(e2bReasonOf(rec({ state: 'ready' })), undefined);
    assert.equal(e2bReasonOf(rec({ state: 'building' })), undefined);
    assert.equal(e2bReasonOf(rec({ state: 'cancelled' }))?.message, 'The build was cancelled');
  });
});

// --- the routes over a fake builds service ----------------------------------------------------

type FakeBuild = BuildRecord & { plan?: BuildPlan; noCache?: boolean; allowDomains?: string[]; log: BuildLogEvent[] };

/** BuildsApi in memory: builds finish when the test says; uploads and templates are maps. */
class FakeBuilds implements BuildsApi {
  readonly builds = new Map<string, FakeBuild>();
  readonly uploads = new Map<string, Buffer>();
  templates: TemplateRecord[] = [];
  private n = 0;

  private make(
    accountId: string,
    o: { name: string; tag: string; extraTags?: string[]; source: BuildRecord['source'] },
  ): FakeBuild {
    const b: FakeBuild = {
      id: `bld_${++this.n}`,
      accountId,
      name: o.name,
      tag: o.tag,
      extraTags: o.extraTags ?? [],
      state: 'queued',
      source: o.source,
      createdAt: Date.UTC(2030, 0, 1) + this.n,
      stepsTotal: 0,
      stepsDone: 0,
      stepsCached: 0,
      log: [],
    };
    this.builds.set(b.id, b);
    return b;
  }
  /** Adds a log line to a build. */
  say(id: string, text: string, stream: 'stdout' | 'stderr' | 'system' = 'stdout'): void {
    const b = this.builds.get(id)!;
    b.log.push({ type: 'log', seq: b.log.length, time: new Date(Date.UTC(2030, 0, 1)).toISOString(), stream, text });
  }
  /** Ends a build: ready makes its templates. */
  finish(id: string, state: 'ready' | 'error', error?: BuildRecord['error']): void {
    const b = this.builds.get(id)!;
    b.state = state;
    b.finishedAt = Date.UTC(2030, 0, 2);
    if (error) b.error = error;
    if (state === 'ready')
      for (const tag of [b.tag, ...b.extraTags]) {
        this.templates = this.templates.filter(
          (t) => !(t.accountId === b.accountId && t.name === b.name && t.tag === tag),
        );
        this.templates.push({
          accountId: b.accountId,
          name: b.name,
          tag,
          driverRef: `snapshot/${b.accountId}/_l.x`,
          digest: 'sha256:x',
          sizeBytes: 1,
          buildId: b.id,
          createdAt: b.finishedAt,
        });
      }
  }

  async createFromDockerfile(): Promise<BuildRecord> {
    throw new Error('not used');
  }
  async start(account: AccountRecord, plan: BuildPlan, o: Parameters<BuildsApi['start']>[2]): Promise<BuildRecord> {
    const b = this.make(account.id, o);
    b.plan = plan;
    b.noCache = o.noCache;
    this.finish(b.id, 'ready');
    return b;
  }
  async reserve(account: AccountRecord, o: Parameters<BuildsApi['reserve']>[1]): Promise<BuildRecord> {
    return Object.assign(this.make(account.id, o), o.allowDomains ? { allowDomains: o.allowDomains } : {});
  }
  async startReserved(
    account: AccountRecord,
    buildId: string,
    plan: BuildPlan,
    o?: { noCache?: boolean },
  ): Promise<BuildRecord> {
    const b = await this.get(account.id, buildId);
    if (b.state !== 'queued' || (b as FakeBuild).plan) throw new SandboxdError('conflict', 'already started');
    Object.assign(b, { plan, noCache: o?.noCache, state: 'building' });
    return b;
  }
  async get(accountId: string, buildId: string): Promise<FakeBuild> {
    const b = this.builds.get(buildId);
    if (!b || b.accountId !== accountId) throw new SandboxdError('not_found', `Build ${buildId} not found`);
    return b;
  }
  async list(accountId: string, o?: { name?: string }): Promise<BuildRecord[]> {
    return [...this.builds.values()]
      .filter((b) => b.accountId === accountId && (!o?.name || b.name === o.name))
      .reverse();
  }
  async cancel(): Promise<BuildRecord> {
    throw new Error('not used');
  }
  async delete(): Promise<void> {
    throw new Error('not used');
  }
  async *logs(
    accountId: string,
    buildId: string,
    o: { offset?: number; follow?: boolean },
  ): AsyncIterable<BuildLogEvent> {
    const b = await this.get(accountId, buildId);
    yield* b.log.slice(o.offset ?? 0);
    if (o.follow && ['ready', 'error', 'cancelled'].includes(b.state)) yield { type: 'end', state: b.state };
  }
  async hasUpload(accountId: string, hash: string): Promise<boolean> {
    return this.uploads.has(`${accountId}:${hash}`);
  }
  async putUpload(accountId: string, hash: string, body: Readable): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of body) chunks.push(c as Buffer);
    this.uploads.set(`${accountId}:${hash}`, Buffer.concat(chunks));
  }
  async listTemplates(accountId: string, o?: { name?: string }): Promise<TemplateRecord[]> {
    return this.templates.filter((t) => t.accountId === accountId && (!o?.name || t.name === o.name));
  }
  async getTemplate(accountId: string, name: string, tag: string): Promise<TemplateRecord> {
    const t = this.templates.find((x) => x.accountId === accountId && x.name === name && x.tag === tag);
    if (!t) throw new SandboxdError('not_found', `Template ${name}:${tag} not found`);
    return t;
  }
  async deleteTemplate(accountId: string, name: string, tag?: string): Promise<void> {
    const before = this.templates.length;
    this.templates = this.templates.filter(
      (t) => !(t.accountId === accountId && t.name === name && (tag === undefined || t.tag === tag)),
    );
    if (this.templates.length === before) throw new SandboxdError('not_found', `Template ${name} not found`);
  }
}

function assertError(r: LightMyRequestResponse, status: number, kind: string, text?: string): void {
  assert.equal(r.statusCode, status, r.body);
  const b = r.json();
  assert.equal(b.code, status);
  assert.equal(b.kind, kind);
  if (text) assert.ok(b.message.includes(text), `${b.message} should include ${text}`);
}

describe("E2B's template routes over the builds service (fake)", () => {
  let t: TestApp;
  let fake: FakeBuilds;
  before(async () => {
    t = await makeTestApp();
    fake = new FakeBuilds();
    (t.app.services as { builds: BuildsApi }).builds = fake;
  });
  after(() => t.close());

  async function user() {
    const a = await t.newAccount({ tokens: 100_000 });
    const e2b = (method: string, url: string, payload?: unknown) =>
      t.req({
        method: method as 'GET',
        url: `/e2b${url}`,
        key: null,
        headers: { 'x-api-key': a.key },
        ...(payload === undefined ? {} : { payload: payload as object }),
      });
    return { ...a, e2b };
  }

  it('request: 202 with templateID = the name and the build; tags; sizes past the plan refused', async () => {
    const u = await user();
    const r = await u.e2b('POST', '/v3/templates', {
      name: 'App:v1',
      tags: ['prod'],
      cpuCount: 1,
      memoryMB: 512,
      minFreeDiskMb: 10,
    });
    assert.equal(r.statusCode, 202, r.body);
    const b = r.json();
    assert.match(b.buildID, /^bld_/);
    assert.deepEqual(b, {
      templateID: 'app',
      buildID: b.buildID,
      public: false,
      names: ['app'],
      aliases: ['app'],
      tags: ['v1', 'prod'],
    });
    const rec = await fake.get(u.id, b.buildID);
    assert.deepEqual(
      [rec.name, rec.tag, rec.extraTags, rec.source, rec.state],
      ['app', 'v1', ['prod'], 'e2b', 'queued'],
    );
    assert.equal(rec.allowDomains, undefined, 'no network unless named');
    const withNet = await t.req({
      method: 'POST',
      url: '/e2b/v3/templates',
      key: null,
      headers: { 'x-api-key': u.key, 'x-sandboxd-allow-domains': ' deb.debian.org, *.pypi.org ,' },
      payload: { name: 'net' },
    });
    assert.equal(withNet.statusCode, 202, withNet.body);
    assert.deepEqual((await fake.get(u.id, withNet.json().buildID)).allowDomains, ['deb.debian.org', '*.pypi.org']);
    assertError(await u.e2b('POST', '/v3/templates', { name: 'x', cpuCount: 64 }), 400, 'validation', 'cpuCount');
    assertError(
      await u.e2b('POST', '/v3/templates', { name: 'x', memoryMB: 10_000_000 }),
      400,
      'validation',
      'memoryMB',
    );
    assertError(await u.e2b('POST', '/v3/templates', { tags: ['x'] }), 400, 'validation', 'name is required');
    assertError(await u.e2b('POST', '/v3/templates', { name: 'base' }), 409, 'conflict');
    assertError(await u.e2b('POST', '/v3/templates', { name: 'x', tags: 'v1' }), 400, 'validation');
  });

  it('files: a signed upload URL; the PUT needs no key, only that URL, for that account and hash', async () => {
    const u = await user();
    const other = await user();
    const link = await u.e2b('GET', `/templates/app/files/${HASH}`);
    assert.equal(link.statusCode, 201, link.body);
    assert.equal(link.json().present, false);
    const url = new URL(link.json().url);
    assert.equal(url.origin + url.pathname, `http://localhost:80/e2b/templates/uploads/${HASH}`.replace(':80', ''));
    const put = (path: string) =>
      t.app.http.inject({
        method: 'PUT',
        url: path,
        payload: Buffer.from('tar bytes'),
        headers: { 'content-type': 'application/octet-stream' },
      });
    const at = url.pathname + url.search;
    // Tampered: another hash, another account, a changed expiry or signature.
    assertError(await put(at.replace(HASH, HASH2)), 401, 'unauthorized');
    assertError(await put(at.replace(u.id, other.id)), 401, 'unauthorized');
    const q = url.searchParams;
    const expired = new URLSearchParams(q);
    expired.set('expires', String(Number(q.get('expires')) + 1));
    assertError(await put(`${url.pathname}?${expired}`), 401, 'unauthorized');
    const bad = new URLSearchParams(q);
    bad.set('signature', `${q.get('signature')?.slice(0, -2)}xx`);
    assertError(await put(`${url.pathname}?${bad}`), 401, 'unauthorized');
    assertError(await put(url.pathname), 400, 'validation');
    assert.equal(fake.uploads.size, 0, 'nothing kept');
    // As the SDK sends it: no Content-Type, a Content-Length.
    const ok = await t.app.http.inject({ method: 'PUT', url: at, payload: Buffer.from('tar bytes') });
    assert.equal(ok.statusCode, 200, ok.body);
    assert.equal(fake.uploads.get(`${u.id}:${HASH}`)?.toString(), 'tar bytes');
    assert.equal((await u.e2b('GET', `/templates/app/files/${HASH}`)).json().present, true);
    assert.equal((await other.e2b('GET', `/templates/app/files/${HASH}`)).json().present, false, "another account's");
    // Past its expiry (signed as the server signs, an hour ago).
    const past = Math.floor(Date.now() / 1000) - 10;
    const sig = await new AccessTokens(t.app.store).uploadSignature(u.id, HASH, past);
    assertError(
      await put(`${url.pathname}?account=${u.id}&expires=${past}&signature=${sig}`),
      401,
      'unauthorized',
      'expired',
    );
    assertError(await u.e2b('GET', '/templates/app/files/..%2F..'), 400, 'validation');
  });

  it('start: the compiled plan goes to the reserved build; missing files, bad steps and unknown bases refuse first', async () => {
    const u = await user();
    const { buildID } = (await u.e2b('POST', '/v3/templates', { name: 'svc' })).json();
    const start = (body: unknown, b = buildID, tpl = 'svc') => u.e2b('POST', `/v2/templates/${tpl}/builds/${b}`, body);
    const steps = [
      { type: 'COPY', args: ['a', '/a'], filesHash: HASH, force: false, forceUpload: null, resolveSymlinks: false },
      { type: 'RUN', args: ['make'], force: false },
    ];
    assertError(await start({ fromImage: 'local/busybox:latest', steps }), 400, 'validation', 'were not uploaded');
    fake.uploads.set(`${u.id}:${HASH}`, Buffer.from('x'));
    assertError(
      await start({ fromImage: 'local/busybox:latest', steps: [{ type: 'NOPE' }] }),
      400,
      'validation',
      "'NOPE'",
    );
    assertError(await start({ fromTemplate: 'missing' }), 404, 'template_not_found', 'missing:latest');
    assertError(await start({ fromImage: 'x' }, 'bld_nope'), 404, 'not_found');
    assertError(await start({ fromImage: 'x' }, buildID, 'other'), 404, 'not_found');
    assert.equal((await fake.get(u.id, buildID)).plan, undefined, 'nothing started');
    const r = await start({ fromImage: 'local/busybox:latest', steps, force: true, startCmd: 'x', newSdkField: 1 });
    assert.equal(r.statusCode, 202, r.body);
    const b = await fake.get(u.id, buildID);
    assert.equal(b.noCache, true);
    assert.deepEqual(
      b.plan?.stages[0].steps.map((s) => s.kind),
      ['copy', 'run', 'config'],
    );
    assertError(await start({ fromImage: 'x' }), 409, 'conflict');
    const other = await user();
    assertError(await other.e2b('POST', `/v2/templates/svc/builds/${buildID}`, { fromImage: 'x' }), 404, 'not_found');
  });

  it('status: pages of logs from logsOffset; after the end an empty page; the reason of a failure', async () => {
    const u = await user();
    const { buildID } = (await u.e2b('POST', '/v3/templates', { name: 'logs' })).json();
    const status = (q = '') => u.e2b('GET', `/templates/logs/builds/${buildID}/status${q}`);
    let s = (await status()).json();
    assert.deepEqual(s, { templateID: 'logs', buildID, status: 'waiting', logEntries: [], logs: [] });
    fake.builds.get(buildID)!.state = 'building';
    for (let i = 0; i < 130; i++) fake.say(buildID, `line ${i}\n`, i % 2 ? 'stderr' : 'system');
    s = (await status()).json();
    assert.equal(s.status, 'building');
    assert.equal(s.logEntries.length, 100, 'a page is at most 100');
    assert.deepEqual(s.logEntries[0], { timestamp: '2030-01-01T00:00:00.000Z', level: 'info', message: 'line 0' });
    assert.equal(s.logs[1], '[2030-01-01T00:00:00.000Z] line 1');
    s = (await status('?logsOffset=100&limit=20')).json();
    assert.deepEqual(
      s.logEntries.map((e: { message: string }) => e.message),
      Array.from({ length: 20 }, (_, i) => `line ${100 + i}`),
    );
    assert.equal((await status('?level=warn')).json().logEntries.length, 0);
    fake.finish(buildID, 'error', {
      code: 400,
      kind: 'validation',
      message: 'step 2 (RUN false): exit code 1',
      details: { line: 2, instruction: 'RUN false', exitCode: 1, output: 'boom\n' },
    });
    s = (await status('?logsOffset=130')).json();
    assert.deepEqual(s, {
      templateID: 'logs',
      buildID,
      status: 'error',
      logEntries: [],
      logs: [],
      reason: {
        message: 'step 2 (RUN false): exit code 1',
        step: '2',
        logEntries: [{ timestamp: '2030-01-02T00:00:00.000Z', level: 'error', message: 'boom' }],
      },
    });
    assert.equal(
      (await status('?logsOffset=5000')).json().logEntries.length,
      0,
      'past the end: empty, so the SDK stops',
    );
    assertError(await status('?logsOffset=-1'), 400, 'validation');
    assertError(await status('?limit=101'), 400, 'validation');
    assertError(await u.e2b('GET', `/templates/other/builds/${buildID}/status`), 404, 'not_found');
  });

  it('names and tags: exists, tags, assign (a build without steps), remove, delete; lists', async () => {
    const u = await user();
    const { buildID } = (await u.e2b('POST', '/v3/templates', { name: 'web:v1' })).json();
    assertError(await u.e2b('GET', '/templates/aliases/web'), 404, 'not_found');
    fake.finish(buildID, 'ready');
    assert.deepEqual((await u.e2b('GET', '/templates/aliases/web')).json(), { templateID: 'web', public: false });
    assert.equal((await u.e2b('GET', '/templates/aliases/web:v1')).statusCode, 200);
    assertError(await u.e2b('GET', '/templates/aliases/web:v2'), 404, 'not_found', "tag 'v2'");
    assert.deepEqual((await u.e2b('GET', '/templates/aliases/base')).json(), { templateID: 'base', public: true });
    assertError(await (await user()).e2b('GET', '/templates/aliases/web'), 404, 'not_found');

    const a = await u.e2b('POST', '/templates/tags', { target: 'web:v1', tags: ['prod', 'v1', 'Stable'] });
    assert.equal(a.statusCode, 201, a.body);
    assert.deepEqual(a.json(), { tags: ['prod', 'v1', 'stable'], buildID });
    const tagBuild = [...fake.builds.values()].at(-1)!;
    assert.deepEqual(tagBuild.plan, {
      stages: [{ line: 1, base: { kind: 'image', ref: 'templates/web:v1' }, steps: [] }],
      target: 0,
    });
    assert.deepEqual([tagBuild.tag, tagBuild.extraTags], ['prod', ['stable']]);
    const tags = (await u.e2b('GET', '/templates/web/tags')).json() as Array<{
      tag: string;
      buildID: string;
      createdAt: string;
    }>;
    assert.deepEqual(tags.map((x) => x.tag).sort(), ['prod', 'stable', 'v1']);
    assertError(await u.e2b('POST', '/templates/tags', { target: 'web:v9', tags: ['x'] }), 404, 'not_found');
    assertError(await u.e2b('GET', '/templates/none/tags'), 404, 'not_found');

    const list = (await u.e2b('GET', '/v2/templates')).json();
    assert.equal(list.length, 1);
    assert.equal(list[0].templateID, 'web');
    assert.equal(list[0].buildStatus, 'ready');
    const one = (await u.e2b('GET', '/templates/web')).json();
    assert.equal(one.templateID, 'web');
    assert.deepEqual(
      one.builds.map((b: { status: string }) => b.status),
      ['ready', 'ready'],
    );

    assertError(
      await u.e2b('DELETE', '/templates/tags', { name: 'web', tags: ['prod', 'nope'] }),
      404,
      'not_found',
      'nope',
    );
    assert.equal((await u.e2b('DELETE', '/templates/tags', { name: 'web', tags: ['prod'] })).statusCode, 204);
    assert.equal((await u.e2b('DELETE', '/templates/web:stable')).statusCode, 204);
    assert.deepEqual(
      (await fake.listTemplates(u.id)).map((x) => x.tag),
      ['v1'],
    );
    assert.equal((await u.e2b('DELETE', '/templates/web')).statusCode, 204);
    assertError(await u.e2b('DELETE', '/templates/web'), 404, 'not_found');
    assert.deepEqual((await u.e2b('GET', '/templates')).json(), []);
  });

  it("a create names the account's template (name or name:tag) before an image of that name", async () => {
    const u = await user();
    const { buildID } = (await u.e2b('POST', '/v3/templates', { name: 'tpl' })).json();
    fake.finish(buildID, 'ready');
    // The fake runtime has no templates/ images: the 404 names the image the create asked for.
    const r = await u.e2b('POST', '/v2/sandboxes', { templateID: 'tpl' });
    assertError(r, 404, 'template_not_found');
    assert.equal(r.json().details.image, 'templates/tpl:latest');
    const other = await (await user()).e2b('POST', '/v2/sandboxes', { templateID: 'tpl' });
    assert.equal(other.json().details.image, 'tpl', "another account's template is not one");
    const busybox = await u.e2b('POST', '/v2/sandboxes', { templateID: 'local/busybox:latest' });
    assert.equal(busybox.statusCode, 201, busybox.body);
  });

  it('hostile input: every bad request is a 4xx in the error shape, nothing is made, the server stays up', async () => {
    const u = await user();
    const { buildID } = (await u.e2b('POST', '/v3/templates', { name: 'h' })).json();
    const before = fake.builds.size;
    const long = 'a'.repeat(5000);
    const cases: Array<[string, string, unknown?]> = [
      ['POST', '/v3/templates', []],
      ['POST', '/v3/templates', 'x'],
      ['POST', '/v3/templates', { name: 5 }],
      ['POST', '/v3/templates', { name: long }],
      ['POST', '/v3/templates', { name: 'x\u0000y' }],
      ['POST', '/v3/templates', { name: 'x', tags: [5] }],
      ['POST', '/v3/templates', { name: 'x', tags: Array.from({ length: 100 }, (_, i) => `t${i}`) }],
      ['POST', '/v3/templates', { name: '__proto__' }],
      ['POST', '/v3/templates', { name: 'x', cpuCount: -1 }],
      ['GET', '/templates/x/files/%00'],
      ['GET', `/templates/x/files/${'a'.repeat(150)}`],
      ['GET', `/templates/${'a'.repeat(150)}/files/${HASH}`],
      ['GET', `/templates/..%2f..%2fetc/files/${HASH}`],
      ['POST', `/v2/templates/h/builds/${buildID}`, { fromImage: { a: 1 } }],
      ['POST', `/v2/templates/h/builds/${buildID}`, { fromImage: 'x', steps: 'RUN x' }],
      ['POST', `/v2/templates/h/builds/${buildID}`, { fromImage: 'x', steps: [{ type: 5 }] }],
      ['POST', `/v2/templates/h/builds/${buildID}`, { fromImage: 'x', steps: [{ type: 'RUN', args: [1] }] }],
      [
        'POST',
        `/v2/templates/h/builds/${buildID}`,
        { fromImage: 'x', steps: [{ type: 'RUN', args: Array(3000).fill('a') }] },
      ],
      [
        'POST',
        `/v2/templates/h/builds/${buildID}`,
        { fromImage: 'x', steps: [{ type: 'RUN', args: ['a', '../../root'] }] },
      ],
      ['POST', `/v2/templates/h/builds/${buildID}`, { fromImage: 'x', startCmd: long.repeat(4) }],
      ['POST', `/v2/templates/h/builds/${buildID}`, { fromTemplate: '../x' }],
      ['GET', `/templates/h/builds/${buildID}/status?logsOffset=abc`],
      ['GET', `/templates/h/builds/${buildID}/status?limit=1e9`],
      ['GET', `/templates/h/builds/${buildID}/status?what=1`],
      ['DELETE', '/templates/tags'],
      ['DELETE', '/templates/tags', { name: 'h', tags: [] }],
      ['POST', '/templates/tags', { target: '::::', tags: ['x'] }],
      ['POST', '/templates/tags', { target: 'h', tags: ['../x'] }],
      ['GET', '/templates/aliases/x%00y'],
      ['GET', '/templates/aliases/A%20B'],
      ['DELETE', '/templates/x:y:z'],
    ];
    for (const [method, url, body] of cases) {
      const r = await u.e2b(method, url, body);
      assert.ok(r.statusCode >= 400 && r.statusCode < 500, `${method} ${url}: ${r.statusCode} ${r.body}`);
      const b = r.json();
      assert.equal(b.code, r.statusCode, `${method} ${url}`);
      assert.equal(typeof b.kind, 'string');
      assert.equal(typeof b.message, 'string');
    }
    // A path parameter past the router's 200 characters matches no route but the catch-all.
    const huge = await u.e2b('GET', `/templates/x/files/${long}`);
    assert.equal(huge.statusCode, 501, huge.body);
    assert.equal(huge.json().kind, 'unsupported');
    // The upload URL with nonsense: refused before anything is read or kept.
    for (const q of ['account=x&expires=abc&signature=s', 'account=x&expires=99999999999999999999&signature=s', '']) {
      const r = await t.app.http.inject({ method: 'PUT', url: `/e2b/templates/uploads/${HASH}?${q}`, payload: 'x' });
      assert.ok(r.statusCode === 400 || r.statusCode === 401, `${q}: ${r.statusCode} ${r.body}`);
    }
    const r = await t.app.http.inject({
      method: 'PUT',
      url: '/e2b/templates/uploads/..%2F..%2Fx?account=x&expires=1&signature=s',
      payload: 'x',
    });
    assert.ok(r.statusCode >= 400 && r.statusCode < 500, r.body);
    assert.equal(fake.builds.size, before, 'no build made');
    assert.equal((await fake.get(u.id, buildID)).plan, undefined, 'the reservation was not started');
    assert.equal((await u.e2b('GET', '/templates')).statusCode, 200, 'still serving');
  });

  it('needs the API key (but the upload URL); the rest of the template API is 501 naming it', async () => {
    assertError(
      await t.req({ method: 'POST', url: '/e2b/v3/templates', key: null, payload: { name: 'x' } }),
      401,
      'unauthorized',
    );
    assertError(await t.req({ method: 'GET', url: `/e2b/templates/x/files/${HASH}`, key: null }), 401, 'unauthorized');
    const u = await user();
    assertError(await u.e2b('POST', '/templates', {}), 501, 'unsupported', 'legacy builds');
    assertError(await u.e2b('PATCH', '/v2/templates/x', { public: true }), 501, 'unsupported');
    assertError(await u.e2b('GET', '/v3/templates'), 501, 'unsupported');
  });
});
