// biome-ignore-all lint/suspicious/noTemplateCurlyInString: Dockerfile ${VAR} substitutions, not templates
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import fc from 'fast-check';
import { DEFAULT_PATH, dockerfileBaseImages, type ParseDockerfileOptions, parseDockerfile } from './dockerfile.js';
import type { BuildPlan, ConfigStep, CopyStep, RunStep, Step, WorkdirStep } from './plan.js';

const parse = (text: string, o?: ParseDockerfileOptions): BuildPlan => parseDockerfile(text, o);
/** The steps of the target stage. */
const steps = (text: string, o?: ParseDockerfileOptions): Step[] => {
  const p = parse(text, o);
  return p.stages[p.target].steps;
};
const only = <T extends Step>(text: string, o?: ParseDockerfileOptions): T => {
  const s = steps(text, o);
  assert.equal(s.length, 1, `one step from ${JSON.stringify(text)}: ${JSON.stringify(s)}`);
  return s[0] as T;
};
const last = <T extends Step>(text: string, o?: ParseDockerfileOptions): T => steps(text, o).at(-1) as T;

/** The error a Dockerfile gets: a validation SandboxdError naming its line, checked here. */
function refusal(text: string, line: number, pattern: RegExp, o?: ParseDockerfileOptions): SandboxdError {
  let err: unknown;
  try {
    parse(text, o);
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof SandboxdError, `${JSON.stringify(text)} must be refused, got ${String(err)}`);
  assert.equal(err.kind, 'validation');
  assert.match(err.message, new RegExp(`^Dockerfile line ${line}: `), err.message);
  assert.match(err.message, pattern);
  const d = err.details as { line: number; instruction: string };
  assert.equal(d.line, line);
  assert.equal(typeof d.instruction, 'string');
  return err;
}

describe('parseDockerfile: lines', () => {
  it('drops comments and leading whitespace, joins continuations (comments and empty lines inside them too)', () => {
    const run = only<RunStep>(
      [
        '# leading comment',
        '   FROM  local/busybox  ',
        '',
        '    # indented comment',
        'run echo a \\',
        '# inside the continuation',
        '',
        '   b   \\  ',
        'c',
      ].join('\n'),
    );
    assert.equal(run.kind, 'run');
    assert.equal(run.line, 5);
    assert.deepEqual(run.argv, ['/bin/sh', '-c', 'echo a    b   c']);
    assert.equal(run.text, 'run echo a    b   c');
  });

  it('takes CRLF line ends, a byte-order mark and a continuation at the end of the file', () => {
    const run = only<RunStep>('\uFEFFFROM a\r\nRUN x \\\r\n  y \\');
    assert.deepEqual(run.argv, ['/bin/sh', '-c', 'x   y']);
    assert.equal(run.line, 2);
  });

  it('# escape=` makes the backtick the escape and continuation character; # syntax= is ignored', () => {
    const s = steps(
      [
        '# syntax=docker/dockerfile:1',
        '# escape=`',
        '',
        'FROM a',
        'WORKDIR C:\\src',
        'RUN dir `',
        '  /b',
        'ENV X=`$Y',
      ].join('\n'),
    );
    assert.equal((s[0] as WorkdirStep).path, '/C:\\src');
    assert.deepEqual((s[1] as RunStep).argv, ['/bin/sh', '-c', 'dir   /b']);
    assert.deepEqual((s[2] as ConfigStep).set, { env: { X: '$Y' } });
  });

  it('reads directives only at the very top: after a comment or an instruction they are comments', () => {
    const p = steps('# a comment\n# escape=`\nFROM a\nRUN x `\n');
    assert.deepEqual((p[0] as RunStep).argv, ['/bin/sh', '-c', 'x `']);
    refusal('# escape=\\\n# ESCAPE=`\nFROM a', 2, /only one escape parser directive/);
    refusal('# escape=x\nFROM a', 1, /invalid escape token 'x'/);
  });

  it('keywords are case-insensitive', () => {
    const s = steps('from a\nEnV X=1\nrUn true');
    assert.deepEqual(
      s.map((x) => x.kind),
      ['config', 'run'],
    );
  });
});

describe('parseDockerfile: FROM and stages', () => {
  it('takes an image with a tag or digest, an AS name (lowercased), scratch, and sandboxd images', () => {
    const digest = `sha256:${'a'.repeat(64)}`;
    for (const ref of [
      'python',
      'python:3.12-slim',
      `docker.io/library/python@${digest}`,
      `registry.local:5000/team/app:v1@${digest}`,
      'local/debian:bookworm',
      'snapshots/my-snap',
      'templates/web:1.0',
      'templates/web',
      'scratch',
    ]) {
      const p = parse(`FROM ${ref} AS Build_1`);
      assert.deepEqual(p.stages[0].base, { kind: 'image', ref });
      assert.equal(p.stages[0].name, 'build_1');
      assert.equal(p.stages[0].line, 1);
    }
  });

  it('substitutes global ARGs (and the automatic platform ARGs) in FROM', () => {
    const p = parse('ARG REPO=local\nARG IMG=${REPO}/debian\nARG TAG\nFROM $IMG:${TAG:-bookworm}', {});
    assert.deepEqual(p.stages[0].base, { kind: 'image', ref: 'local/debian:bookworm' });
    const q = parse('ARG IMG=x\nARG TAG\nFROM $IMG:${TAG:-bookworm}', { buildArgs: { IMG: 'py', TAG: '3' } });
    assert.deepEqual(q.stages[0].base, { kind: 'image', ref: 'py:3' });
    assert.deepEqual(parse('FROM app-$TARGETARCH').stages[0].base, { kind: 'image', ref: 'app-amd64' });
  });

  it('--platform is linux/amd64 only (also through $BUILDPLATFORM / $TARGETPLATFORM)', () => {
    for (const p of ['linux/amd64', '$BUILDPLATFORM', '${TARGETPLATFORM}', 'LINUX/AMD64']) {
      assert.equal(parse(`FROM --platform=${p} a`).stages.length, 1);
    }
    refusal('FROM a\nFROM --platform=linux/arm64 b', 2, /--platform=linux\/arm64: only linux\/amd64/);
    refusal('FROM --platform a', 1, /missing a value on flag: --platform/);
  });

  it('refuses bad FROMs by line', () => {
    refusal('FROM', 1, /FROM requires either one or three arguments/);
    refusal('FROM a b', 1, /FROM requires either one or three arguments/);
    refusal('FROM a AS 1st', 1, /invalid name for build stage: "1st"/);
    refusal('FROM a AS x\nFROM b AS X', 2, /stage name "x" is already used on line 1/);
    refusal('FROM Ubuntu', 1, /"Ubuntu" is not a valid image reference/);
    refusal('FROM a/../b', 1, /not a valid image reference/);
    refusal('ARG B\nFROM $B', 2, /base name \(\$B\) should not be blank/);
    refusal('FROM a:b:c', 1, /not a valid image reference/);
    refusal('FROM snapshots/Bad', 1, /not a valid image reference/);
    refusal('FROM --foo=1 a', 1, /unknown flag: --foo/);
    refusal('FROM later\nFROM b AS later', 1, /FROM later names a later stage/);
    refusal('FROM a AS self\nFROM self2 AS self2', 2, /FROM self2 names this stage itself/);
  });

  it('FROM <earlier stage> builds on it and inherits its config; only the stages the target needs are kept', () => {
    const p = parse(
      [
        'FROM a AS unused', // 1
        'RUN never',
        'FROM b AS base', // 3
        'ENV P=1',
        'WORKDIR /srv',
        'SHELL ["/bin/bash", "-c"]',
        'FROM c AS tools', // 7
        'RUN make tools',
        'FROM base', // 9
        'COPY --from=tools /t ./',
        'COPY --from=2 /t2 rel/',
        'RUN echo $P',
      ].join('\n'),
    );
    assert.equal(p.stages.length, 3);
    assert.equal(p.target, 2);
    assert.deepEqual(
      p.stages.map((s) => [s.name, s.line]),
      [
        ['base', 3],
        ['tools', 7],
        [undefined, 9],
      ],
    );
    assert.deepEqual(p.stages[2].base, { kind: 'stage', stage: 0 });
    const [c1, c2, run] = p.stages[2].steps as [CopyStep, CopyStep, RunStep];
    assert.deepEqual(c1.from, { kind: 'stage', stage: 1 });
    assert.equal(c1.dest, '/srv/');
    assert.deepEqual(c2.from, { kind: 'stage', stage: 1 });
    assert.equal(c2.dest, '/srv/rel/');
    assert.deepEqual(run.argv, ['/bin/bash', '-c', 'echo $P']);
  });

  it('an unneeded stage is not evaluated (an error in its substitutions says nothing) but its syntax is checked', () => {
    assert.equal(parse('FROM a AS x\nENV Y=${U:?unset}\nFROM b').stages.length, 1);
    refusal('FROM a AS x\nVOLUME /data\nFROM b', 2, /VOLUME is not supported: use named volumes/);
  });

  it('limits: 1 MiB, 1,000 instructions, 100 stages', () => {
    refusal(`FROM a\nRUN ${'x'.repeat(1024 * 1024)}`, 1, /over 1048576 bytes/);
    refusal(`FROM a\n${'RUN x\n'.repeat(1000)}`, 1001, /more than 1000 instructions/);
    refusal('FROM a\n'.repeat(101), 101, /more than 100 stages/);
    assert.equal(parse('FROM a\n'.repeat(100)).stages.length, 1);
  });
});

describe('parseDockerfile: ARG', () => {
  it('a global ARG is visible in a stage only when redeclared; build args override defaults', () => {
    const df = 'ARG V=1\nARG G\nFROM a\nRUN echo $V\nARG V\nARG G\nARG L=local-$V\nRUN echo $V';
    const [r1, r2] = steps(df) as RunStep[];
    assert.deepEqual(r1.args, {});
    assert.deepEqual(r2.args, { V: '1', L: 'local-1' });
    const [, r3] = steps(df, { buildArgs: { V: '9', G: 'g', L: 'l', NEVER_DECLARED: 'x' } }) as RunStep[];
    assert.deepEqual(r3.args, { V: '9', G: 'g', L: 'l' });
  });

  it('declares several ARGs per line, quoted defaults, and the platform ARGs when redeclared', () => {
    const r = last<RunStep>('FROM a\nARG A="x y" B C=$A.c TARGETARCH TARGETOS\nRUN true', { buildArgs: { B: 'b' } });
    assert.deepEqual(r.args, { A: 'x y', B: 'b', C: 'x y.c', TARGETARCH: 'amd64', TARGETOS: 'linux' });
  });

  it('ARG values substitute where Docker substitutes, not in RUN', () => {
    const s = steps('FROM a\nARG D=/opt/app\nWORKDIR $D\nCOPY f ${D}/f\nRUN cd $D');
    assert.equal((s[0] as WorkdirStep).path, '/opt/app');
    assert.equal((s[1] as CopyStep).dest, '/opt/app/f');
    assert.deepEqual((s[2] as RunStep).argv, ['/bin/sh', '-c', 'cd $D']);
  });

  it('ENV and ARG of one name: the later one wins for RUN (ENV is what the image keeps)', () => {
    const a = steps('FROM a\nARG X=arg\nENV X=env\nRUN t', { buildArgs: { X: 'given' } });
    assert.deepEqual((a[0] as ConfigStep).set, { env: { X: 'env' } });
    assert.deepEqual((a[1] as RunStep).args, {});
    const b = last<RunStep>('FROM a\nENV X=env\nARG X\nRUN t', { buildArgs: { X: 'given' } });
    assert.deepEqual(b.args, { X: 'given' });
    const c = last<RunStep>('FROM a\nENV X=env\nARG X\nRUN t');
    assert.deepEqual(c.args, {});
  });

  it('the proxy ARGs reach RUN when given, without an ARG', () => {
    const r = last<RunStep>('FROM a\nRUN t', { buildArgs: { HTTPS_PROXY: 'http://p:3128', OTHER: 'x' } });
    assert.deepEqual(r.args, { HTTPS_PROXY: 'http://p:3128' });
  });

  it('refuses ARG without a name', () => {
    refusal('FROM a\nARG', 2, /ARG requires at least one argument/);
    refusal('FROM a\nARG =x', 2, /ARG names can not be blank/);
    refusal('ARG X=${Y:?need_Y}\nFROM a', 1, /ARG: Y: need_Y/);
    refusal('ARG X=${Y:?need Y}\nFROM a', 1, /ARG: syntax error: missing '}'/);
  });
});

describe('parseDockerfile: ENV, LABEL, MAINTAINER', () => {
  it('ENV takes both forms, quotes and escapes', () => {
    const s = steps(
      [
        'FROM a',
        'ENV ONE a value with  spaces',
        'ENV K=V K2="v 2" K3=\'$lit\' K4=a\\ b K5=',
        'ENV Q "quoted value"',
      ].join('\n'),
    );
    assert.deepEqual(
      s.map((x) => (x as ConfigStep).set),
      [
        { env: { ONE: 'a value with  spaces' } },
        { env: { K: 'V', K2: 'v 2', K3: '$lit', K4: 'a b', K5: '' } },
        { env: { Q: 'quoted value' } },
      ],
    );
  });

  it('an ENV uses the values from before it throughout the instruction', () => {
    const s = steps('FROM a\nENV abc=hello\nENV abc=bye def=$abc\nENV ghi=$abc');
    assert.deepEqual(
      s.map((x) => (x as ConfigStep).set),
      [{ env: { abc: 'hello' } }, { env: { abc: 'bye', def: 'hello' } }, { env: { ghi: 'bye' } }],
    );
  });

  it('$PATH is the base image`s (baseConfig), else the default PATH', () => {
    const df = 'FROM golang:1.23\nENV PATH=/x/bin:$PATH';
    assert.deepEqual(only<ConfigStep>(df).set, { env: { PATH: `/x/bin:${DEFAULT_PATH}` } });
    const base = (ref: string) => (ref === 'golang:1.23' ? { env: { PATH: '/usr/local/go/bin:/usr/bin' } } : undefined);
    assert.deepEqual(only<ConfigStep>(df, { baseConfig: base }).set, {
      env: { PATH: '/x/bin:/usr/local/go/bin:/usr/bin' },
    });
  });

  it('LABEL takes pairs (keys substituted too); MAINTAINER is the label maintainer', () => {
    const s = steps(
      'FROM a\nENV V=1.2\nLABEL version=$V "org.x.desc"="a b" ${V}k=v\nLABEL old form value\nMAINTAINER Jo <jo@x>',
    );
    assert.deepEqual(
      s.slice(1).map((x) => (x as ConfigStep).set),
      [
        { labels: { version: '1.2', 'org.x.desc': 'a b', '1.2k': 'v' } },
        { labels: { old: 'form value' } },
        { labels: { maintainer: 'Jo <jo@x>' } },
      ],
    );
  });

  it('refuses malformed pairs by line', () => {
    refusal('FROM a\nENV', 2, /ENV requires at least one argument/);
    refusal('FROM a\nENV ONLYKEY', 2, /ENV must have two arguments/);
    refusal('FROM a\nENV A=1 B', 2, /can't find = in "B"/);
    refusal('FROM a\nLABEL =v', 2, /LABEL names can not be blank/);
    refusal('FROM a\nENV A="open', 2, /ENV: unexpected end of statement while looking for matching double-quote/);
    refusal('FROM a\nMAINTAINER', 2, /MAINTAINER requires exactly one argument/);
    refusal('FROM a\nENV ${E}=v', 2, /ENV names can not be blank/);
    refusal('FROM a\nLABEL __proto__=v', 2, /LABEL name __proto__ is not allowed/);
    refusal('FROM a\nARG __proto__', 2, /ARG name __proto__ is not allowed/);
  });
});

describe('parseDockerfile: EXPOSE, USER, WORKDIR, SHELL', () => {
  it('EXPOSE takes ports with protocols, substituted and split', () => {
    const c = only<ConfigStep>('FROM a\nARG P="8080 9090/udp"\nEXPOSE 80 53/UDP $P 80/tcp');
    assert.deepEqual(c.set, { exposedPorts: ['53/udp', '80/tcp', '8080/tcp', '9090/udp'] });
    refusal('FROM a\nEXPOSE 8000-8010', 2, /port ranges are not supported/);
    refusal('FROM a\nEXPOSE 80/icmp', 2, /invalid protocol "icmp"/);
    refusal('FROM a\nEXPOSE 70000', 2, /invalid port/);
    refusal('FROM a\nEXPOSE 8080:80', 2, /only a container port/);
    refusal('FROM a\nEXPOSE', 2, /EXPOSE requires at least one argument/);
  });

  it('USER takes user[:group], substituted', () => {
    assert.deepEqual(only<ConfigStep>('FROM a\nARG U=app\nUSER $U:staff').set, { user: 'app:staff' });
    assert.deepEqual(only<ConfigStep>('FROM a\nUSER 1000:1000').set, { user: '1000:1000' });
    refusal('FROM a\nUSER', 2, /USER requires exactly one argument/);
    refusal('FROM a\nUSER a b', 2, /USER "a b": expected <user>\[:<group>\]/);
  });

  it('WORKDIR is absolute, relative to the previous one (default /), substituted, and makes the dir', () => {
    const s = steps('FROM a\nWORKDIR rel\nWORKDIR sub/../x/\nENV D=/abs\nWORKDIR $D//y/\nWORKDIR /');
    assert.deepEqual(
      s.map((x) => (x.kind === 'workdir' ? x.path : (x as ConfigStep).set)),
      ['/rel', '/rel/x', { env: { D: '/abs' } }, '/abs/y', { workingDir: '/' }],
    );
    const base = () => ({ workingDir: '/home/app' });
    assert.equal(only<WorkdirStep>('FROM a\nWORKDIR src', { baseConfig: base }).path, '/home/app/src');
    refusal('FROM a\nWORKDIR $UNSET', 2, /WORKDIR requires a path/);
  });

  it('SHELL takes JSON only and wraps later shell forms', () => {
    const s = steps('FROM a\nSHELL ["/bin/bash", "-eo", "pipefail", "-c"]\nRUN a | b\nCMD serve\nENTRYPOINT ["/x"]');
    assert.deepEqual((s[0] as ConfigStep).set, { shell: ['/bin/bash', '-eo', 'pipefail', '-c'] });
    assert.deepEqual((s[1] as RunStep).argv, ['/bin/bash', '-eo', 'pipefail', '-c', 'a | b']);
    assert.deepEqual((s[2] as ConfigStep).set, { cmd: ['/bin/bash', '-eo', 'pipefail', '-c', 'serve'] });
    refusal('FROM a\nSHELL /bin/bash -c', 2, /SHELL requires the arguments to be in JSON form/);
    refusal('FROM a\nSHELL []', 2, /SHELL requires at least one argument/);
  });
});

describe('parseDockerfile: RUN, CMD, ENTRYPOINT', () => {
  it('RUN: shell form wrapped, exec form as is, never substituted; a non-JSON [ is the shell form', () => {
    const s = steps('FROM a\nENV X=1\nRUN echo $X "q"\nRUN ["echo", "$X"]\nRUN [ -f /x ] && echo y\nRUN ["a", "b c"]');
    assert.deepEqual(
      s.slice(1).map((x) => (x as RunStep).argv),
      [
        ['/bin/sh', '-c', 'echo $X "q"'],
        ['echo', '$X'],
        ['/bin/sh', '-c', '[ -f /x ] && echo y'],
        ['a', 'b c'],
      ],
    );
    refusal('FROM a\nRUN', 2, /RUN requires a command/);
    refusal('FROM a\nRUN []', 2, /RUN requires a command/);
    refusal('FROM a\nRUN ["a", 1]', 2, /arrays must be comprised of strings only/);
  });

  it('RUN flags are refused by name; heredocs are refused', () => {
    refusal('FROM a\nRUN --mount=type=cache,target=/root/.cache pip install x', 2, /RUN --mount is not supported/);
    refusal('FROM a\nRUN --network=none x', 2, /RUN --network is not supported/);
    refusal('FROM a\nRUN --security=insecure x', 2, /RUN --security is not supported/);
    refusal('FROM a\nRUN --foo x', 2, /unknown flag: --foo/);
    refusal('FROM a\nRUN <<EOF\necho hi\nEOF', 2, /heredocs \(<<EOF\) are not supported/);
    refusal('FROM a\nRUN cat <<-"END" > /f\nx\nEND', 2, /heredocs/);
    refusal('FROM a\nCOPY <<EOF /f\nx\nEOF', 2, /heredocs/);
    // `<<` inside quotes is not a heredoc; `1 << 2` is one for BuildKit too.
    assert.equal(steps('FROM a\nRUN echo "a <<b" \'<<c\'').length, 1);
    refusal('FROM a\nRUN echo $((1 << 2))', 2, /heredocs/);
    assert.equal(steps('FROM a\nRUN ["sh", "-c", "cat <<EOF"]').length, 1);
  });

  it('CMD and ENTRYPOINT: both forms; ENTRYPOINT resets a CMD not set in this stage', () => {
    const s = steps('FROM a\nENTRYPOINT ["/init"]\nCMD ["serve", "--port=1"]\nENTRYPOINT /bin/run x\nCMD []');
    assert.deepEqual(
      s.map((x) => (x as ConfigStep).set),
      [
        { entrypoint: ['/init'], cmd: null },
        { cmd: ['serve', '--port=1'] },
        { entrypoint: ['/bin/sh', '-c', '/bin/run x'] },
        { cmd: [] },
      ],
    );
    assert.deepEqual(only<ConfigStep>('FROM a\nENTRYPOINT []').set, { entrypoint: null, cmd: null });
    refusal('FROM a\nCMD', 2, /CMD requires a command/);
  });
});

describe('parseDockerfile: COPY and ADD', () => {
  it('joins a relative dest to WORKDIR, keeps a trailing / (and . is the working dir)', () => {
    const s = steps(
      'FROM a\nWORKDIR /app\nCOPY a .\nCOPY a ./\nCOPY a b\nCOPY a b/\nCOPY a /abs/../c\nCOPY a /\nCOPY a ""\nCOPY a sub/.',
    ).slice(1) as CopyStep[];
    assert.deepEqual(
      s.map((c) => c.dest),
      ['/app/', '/app/', '/app/b', '/app/b/', '/c', '/', '/app/', '/app/sub/'],
    );
    assert.ok(s.every((c) => c.from.kind === 'context' && c.add === undefined));
  });

  it('normalises context sources: leading / and .. never leave the context; trailing / dropped', () => {
    const c = only<CopyStep>('FROM a\nCOPY /etc/x ../../y dir/ . ./* sub/../z /dst/');
    assert.deepEqual(c.sources, ['etc/x', 'y', 'dir', '.', '*', 'z']);
  });

  it('takes the JSON form (paths with spaces) and substitutes sources and dest', () => {
    const c = last<CopyStep>('FROM a\nENV N=my\nCOPY ["$N file.txt", "other", "/dst dir/"]');
    assert.deepEqual(c.sources, ['my file.txt', 'other']);
    assert.equal(c.dest, '/dst dir/');
  });

  it('--chown (substituted), --chmod (octal), --link (accepted, no effect)', () => {
    const c = only<CopyStep>('FROM a\nARG U=1000\nCOPY --link --chown=$U:app --chmod=0755 x /x');
    assert.deepEqual([c.chown, c.chmod, c.dest], ['1000:app', 0o755, '/x']);
    assert.equal(only<CopyStep>('FROM a\nCOPY --chmod=644 --link=false x /x').chmod, 0o644);
    refusal('FROM a\nCOPY --chmod=u+x x /x', 2, /only octal modes/);
    refusal('FROM a\nCOPY --chmod=8777 x /x', 2, /only octal modes/);
    refusal('FROM a\nCOPY --chown="a b" x /x', 2, /--chown=a b: expected/);
    refusal('FROM a\nCOPY --chown x /x', 2, /missing a value on flag: --chown/);
    refusal('FROM a\nCOPY --link=maybe x /x', 2, /expecting boolean value for flag --link/);
    refusal('FROM a\nCOPY --chmod=1 --chmod=2 x /x', 2, /duplicate flag specified: --chmod/);
  });

  it('--from: a stage name, a stage index or an image; sources are absolute paths there', () => {
    const p = parse(
      'FROM a AS one\nFROM b\nCOPY --from=one /o /\nCOPY --from=0 o2 /\nCOPY --from=alpine:3 etc/motd /m',
    );
    const [c1, c2, c3] = p.stages[1].steps as CopyStep[];
    assert.deepEqual([c1.from, c1.sources], [{ kind: 'stage', stage: 0 }, ['/o']]);
    assert.deepEqual([c2.from, c2.sources], [{ kind: 'stage', stage: 0 }, ['/o2']]);
    assert.deepEqual([c3.from, c3.sources], [{ kind: 'image', ref: 'alpine:3' }, ['/etc/motd']]);
    assert.deepEqual(
      dockerfileBaseImages(
        'FROM a AS one\nFROM b\nCOPY --from=alpine:3 x /\nFROM scratch AS z\nFROM c AS last\nCOPY --from=one x /',
      ),
      ['a', 'c'],
    );
  });

  it('--from refusals: itself, a later stage, a bad index, a variable, a bad image', () => {
    refusal('FROM a AS me\nCOPY --from=me x /', 2, /names the stage it is in/);
    refusal('FROM a\nCOPY --from=0 x /', 2, /names the stage it is in/);
    refusal('FROM a\nCOPY --from=later x /\nFROM b AS later', 2, /names a later stage/);
    refusal('FROM a\nFROM b\nCOPY --from=5 x /', 3, /invalid stage index 5/);
    refusal('FROM a\nARG S=x\nCOPY --from=$S x /', 3, /variable expansion is not supported for --from/);
    refusal('FROM a\nCOPY --from=Bad:Ref x /', 2, /not a valid image reference/);
    refusal('FROM a\nADD --from=b x /', 2, /unknown flag: --from/);
  });

  it('ADD: local files with add (a local tar is extracted), --unpack=false copies; remote sources refused', () => {
    const s = steps('FROM a\nADD app.tar.gz /opt/\nADD --unpack=false app.tar.gz /keep/\nADD --chown=1:1 dir /d');
    assert.deepEqual(
      s.map((c) => [(c as CopyStep).add, (c as CopyStep).dest]),
      [
        [true, '/opt/'],
        [undefined, '/keep/'],
        [true, '/d'],
      ],
    );
    for (const src of ['https://x.org/f.tgz', 'http://x.org/f', 'git@github.com:o/r.git', 'git://x/r', 'ssh://x/r']) {
      refusal(`FROM a\nADD ${src} /d/`, 2, /ADD of a URL or git repository .* is not supported/);
    }
    refusal('FROM a\nCOPY https://x.org/f /d/', 2, /COPY of a URL or git repository/);
    refusal('FROM a\nADD --checksum=sha256:00 https://x/f /d', 2, /ADD --checksum is not supported/);
    refusal('FROM a\nADD --keep-git-dir https://x/r.git /d', 2, /ADD --keep-git-dir is not supported/);
    refusal('FROM a\nCOPY --parents a/b /d/', 2, /COPY --parents is not supported/);
    refusal('FROM a\nCOPY --exclude=*.md . /d/', 2, /COPY --exclude is not supported: use .dockerignore/);
  });

  it('needs a source and a dest', () => {
    refusal('FROM a\nCOPY onlyone', 2, /COPY requires at least two arguments/);
    refusal('FROM a\nADD ["x"]', 2, /ADD requires at least two arguments/);
    refusal('FROM a\nCOPY "a b" /d/', 2, /COPY: unexpected end of statement/);
  });
});

describe('parseDockerfile: refusals', () => {
  it('ONBUILD, HEALTHCHECK, VOLUME, STOPSIGNAL and unknown instructions, by line', () => {
    refusal('FROM a\n\nONBUILD RUN x', 3, /ONBUILD is not supported/);
    refusal('FROM a\nHEALTHCHECK --interval=5s CMD curl -f localhost', 2, /org\.sandboxd\.ready\.cmd/);
    refusal('FROM a\nVOLUME ["/data"]', 2, /use named volumes/);
    refusal('FROM a\nSTOPSIGNAL SIGTERM', 2, /STOPSIGNAL is not supported/);
    refusal('FROM a\nRUNN x', 2, /unknown instruction: RUNN/);
    refusal('FROM a\nEXPOSE 80 \\\n  81\nBOGUS', 4, /unknown instruction: BOGUS/);
  });

  it('only ARG before the first FROM; a Dockerfile needs a FROM', () => {
    refusal('ARG A\nENV X=1\nFROM a', 2, /ENV before the first FROM: only ARG may come before FROM/);
    refusal('', 1, /no instructions/);
    refusal('# only a comment\n\n', 1, /no instructions/);
    refusal('ARG A=1', 1, /has no FROM/);
  });

  it('instruction flags are checked on every instruction', () => {
    refusal('FROM a\nENV --x=1 A=b', 2, /unknown flag: --x/);
    refusal('FROM a\nWORKDIR --p /x', 2, /unknown flag: --p/);
  });
});

describe('parseDockerfile: substitution is bounded', () => {
  it('a word that grows past its limit once substituted is refused by line (26 doubling ENV lines took the whole heap)', () => {
    const kib = 'x'.repeat(1024);
    // 2000 KiB from one line of 2000 references.
    refusal(`FROM local/busybox\nENV A=${kib}\nENV B=${'$A'.repeat(2000)}\n`, 3, /ENV: .*over \d+ characters/);
    // Doubling: each line twice the last.
    const doubling = `FROM local/busybox\nENV A=${kib}\n${'ENV A=$A$A\n'.repeat(30)}`;
    refusal(doubling, 13, /over \d+ characters/);
  });

  it('the substitutions of one Dockerfile are bounded in total', () => {
    const half = 'x'.repeat(512 * 1024);
    // Each word is under the limit of one; together they are 64 MiB.
    const text = `FROM local/busybox\nENV A=${half}\n${Array.from({ length: 128 }, (_, i) => `LABEL l${i}=$A\n`).join('')}`;
    let err: unknown;
    try {
      parse(text);
    } catch (e) {
      err = e;
    }
    assert.ok(err instanceof SandboxdError, `must be refused, got ${String(err)}`);
    assert.equal(err.kind, 'validation');
    assert.match(err.message, /^Dockerfile line \d+: .*in total/);
    const line = (err.details as { line: number }).line;
    assert.ok(line > 2 && line <= 130, `line ${line}`);
  });
});

describe('parseDockerfile: any text', () => {
  it('parses or refuses with a validation error naming a line, never anything else', () => {
    const words = [
      'FROM a',
      'FROM a AS b',
      'FROM b',
      'ARG X=1',
      'ARG',
      'ENV A=$X',
      'ENV "',
      'RUN echo $A',
      'RUN ["x"',
      'RUN ["x"]',
      'COPY . /d/',
      'COPY --from=b /x /y',
      'COPY --from=0 x y',
      'ADD x.tar /',
      'WORKDIR ${A:-w}',
      'USER u',
      'EXPOSE 80/udp',
      'LABEL k=v',
      'CMD x',
      'ENTRYPOINT ["y"]',
      'SHELL ["/bin/bash", "-c"]',
      'HEALTHCHECK NONE',
      '# c',
      '# escape=`',
      '\\',
      '`',
      '<<EOF',
      '${',
      '--mount=x',
      '"',
      "'",
      '',
    ];
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.constantFrom(...words), fc.string({ maxLength: 12 })), { maxLength: 14 }),
        fc.dictionary(fc.constantFrom('X', 'A', 'Y'), fc.string({ maxLength: 4 })),
        (lines, buildArgs) => {
          try {
            const p = parseDockerfile(lines.join('\n'), { buildArgs });
            assert.ok(p.stages.length >= 1 && p.target === p.stages.length - 1);
          } catch (e) {
            assert.ok(e instanceof SandboxdError, String(e));
            assert.equal(e.kind, 'validation');
            const d = e.details as { line: number };
            assert.ok(Number.isInteger(d.line) && d.line >= 1 && d.line <= Math.max(1, lines.length + 1), e.message);
          }
        },
      ),
      { numRuns: 3000 },
    );
  });
});
