import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { AgentGoneError, agentBinary, ExecAgent } from './exec-agent.js';
import { HostSpawner } from './spawner.js';
import { LocalDriver } from '../driver.js';
import { makeTestDriver } from '../../../../test/local-driver.js';

/** A host process is gone, or a zombie nobody reaped yet (it runs no more either way). */
function gone(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return /^[ZX]$/.test(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0]);
  } catch {
    return true;
  }
}

async function waitExit(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
  return new Promise((resolve) => child.on('exit', (code) => resolve(code)));
}

// The agent's protocol and process handling, with the agent run as a plain host process:
// fast, and every case of the wire format without a sandbox around it.
describe('exec agent (host process)', () => {
  const children: ChildProcess[] = [];
  const startAgent = async (...args: string[]) => {
    const child = spawn(agentBinary(), args, { stdio: ['pipe', 'pipe', 'ignore'] });
    children.push(child);
    return { child, agent: await ExecAgent.attach(child.stdin!, child.stdout!) };
  };
  const base = {
    user: `${process.getuid!()}:${process.getgid!()}`,
    env: ['PATH=/usr/bin:/bin'],
    cwd: '/',
    timeoutMs: 20_000,
    maxOutputBytes: 1 << 20,
  };
  let agent: ExecAgent;
  before(async () => {
    ({ agent } = await startAgent());
  });
  after(() => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  });

  it('a channel that breaks before the runtime exits rejects start(), with no unhandled rejection', async () => {
    const unhandled: unknown[] = [];
    const seen = (e: unknown) => unhandled.push(e);
    process.on('unhandledRejection', seen);
    try {
      // A "runtime" that hands over the channel, closes it at once (as a sandbox deleted under
      // a starting agent does), and exits 0 a moment later.
      const runtime = ['/bin/sh', '-c', 'exec 0<&- 1>&-; sleep 0.3; exit 0'];
      await assert.rejects(ExecAgent.start(runtime, 'no-such-sandbox', { user: '0:0', env: [] }), AgentGoneError);
      await new Promise((r) => setTimeout(r, 50));
      assert.deepEqual(unhandled, []);
    } finally {
      process.off('unhandledRejection', seen);
    }
  });

  it('keeps stdout, stderr and exit code apart, and reports 128+signal', async () => {
    assert.deepEqual(await agent.exec(['/bin/sh', '-c', 'echo out; echo err >&2; exit 3'], base), {
      stdout: 'out\n',
      stderr: 'err\n',
      exitCode: 3,
      truncated: false,
      timedOut: false,
    });
    assert.equal((await agent.exec(['/bin/sh', '-c', 'kill -TERM $$'], base)).exitCode, 143);
  });

  it('answers many commands at once, each with its own output', async () => {
    const rs = await Promise.all(
      Array.from({ length: 40 }, (_, i) => agent.exec(['/bin/sh', '-c', `echo ${i}; exit ${i % 7}`], base)),
    );
    rs.forEach((r, i) => {
      assert.equal(r.stdout, `${i}\n`);
      assert.equal(r.exitCode, i % 7);
    });
  });

  it('on timeout answers 124 and kills the whole tree, daemons in their own group included', async () => {
    const r = await agent.exec(['/bin/sh', '-c', 'sleep 60 & echo $!; setsid sleep 60 & echo $!; sleep 60'], {
      ...base,
      timeoutMs: 300,
    });
    assert.equal(r.exitCode, 124);
    assert.equal(r.timedOut, true);
    const pids = r.stdout.trim().split('\n').map(Number);
    assert.equal(pids.length, 2);
    for (let i = 0; i < 100 && !pids.every(gone); i++) await new Promise((res) => setTimeout(res, 20));
    for (const p of pids) assert.ok(gone(p), `process ${p} of the timed-out command still runs`);
  });

  it('on one socket for both directions (how the server starts it), a flood arrives whole', async () => {
    // The agent's reads are non-blocking, and with a socket on fds 0 and 1 so are its writes:
    // a full socket buffer must make it wait, not drop the channel (it answered 137 before).
    const sp = new HostSpawner();
    let attached: Promise<ExecAgent> | undefined;
    const ran = sp.run(agentBinary(), [], {
      channel: (s) => {
        attached = ExecAgent.attach(s, s);
      },
    });
    try {
      for (let i = 0; i < 100 && !attached; i++) await new Promise((res) => setTimeout(res, 10));
      const a = await attached!;
      const rs = await Promise.all(
        Array.from({ length: 3 }, () =>
          a.exec(['/bin/sh', '-c', 'yes flood | head -c 3000000'], { ...base, maxOutputBytes: 4 << 20 }),
        ),
      );
      for (const r of rs) assert.deepEqual([r.exitCode, r.stdout.length, r.truncated], [0, 3_000_000, false]);
      a.close();
      assert.equal((await ran).code, 0, 'EOF on the channel ends a plain agent');
    } finally {
      sp.close();
    }
  });

  it('caps each stream and says so, draining the rest', async () => {
    const r = await agent.exec(['/bin/sh', '-c', 'head -c 300000 /dev/zero; echo tail >&2'], {
      ...base,
      maxOutputBytes: 1000,
    });
    assert.equal(r.stdout.length, 1000);
    assert.equal(r.stderr, 'tail\n');
    assert.equal(r.truncated, true);
    assert.equal(r.exitCode, 0);
  });

  it('answers 126 for a missing working directory and 127 for a missing program, naming the cause', async () => {
    const cwd = await agent.exec(['/bin/sh', '-c', 'true'], { ...base, cwd: '/no/such/dir' });
    assert.equal(cwd.exitCode, 126);
    assert.match(cwd.stderr, /chdir: No such file or directory/);
    const prog = await agent.exec(['/no/such/program'], base);
    assert.equal(prog.exitCode, 127);
    assert.match(prog.stderr, /execve: No such file or directory/);
  });

  it('runs as the requested user with no extra groups, HOME from its passwd entry', async () => {
    const r = await agent.exec(['/bin/sh', '-c', 'id -u; id -G; echo "$HOME"'], { ...base, user: '65534:65534' });
    const home =
      readFileSync('/etc/passwd', 'utf8')
        .split('\n')
        .find((l) => l.split(':')[2] === '65534')
        ?.split(':')[5] ?? '/';
    assert.equal(r.stdout, `65534\n65534\n${home}\n`);
    assert.equal(
      (await agent.exec(['/bin/sh', '-c', 'echo "$HOME"'], { ...base, env: [...base.env, 'HOME=/x'] })).stdout,
      '/x\n',
    );
  });

  it('gives commands exactly the env asked for, and none of its own descriptors', async () => {
    assert.equal((await agent.exec(['/usr/bin/env'], { ...base, env: ['A=1', 'HOME=/h'] })).stdout, 'A=1\nHOME=/h\n');
    const fds = (await agent.exec(['/bin/sh', '-c', 'ls /proc/self/fd'], base)).stdout.trim().split('\n').map(Number);
    assert.deepEqual(
      fds.filter((f) => f > 3),
      [],
      `a command holds fds ${fds}`,
    );
  });

  it('runs a simple command without the shell, with what the shell would give it', async () => {
    const sh = (command: string) => ['/bin/sh', '-c', command];
    const simple = (command: string) => ({ ...base, cwd: '/tmp', simpleWords: command.split(' ') });
    // Direct: the command is the agent's own child; through the shell, the shell's.
    const ppid = (stat: string) => Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    const agentPid = children[0].pid;
    assert.equal(ppid((await agent.exec(sh('cat /proc/self/stat'), simple('cat /proc/self/stat'))).stdout), agentPid);
    assert.notEqual(ppid((await agent.exec(sh('cat /proc/self/stat'), { ...base, cwd: '/tmp' })).stdout), agentPid);
    // PWD exported as dash does: the working directory, unless an inherited PWD names it.
    assert.equal((await agent.exec(sh('printenv PWD'), simple('printenv PWD'))).stdout, '/tmp\n');
    const stale = { ...simple('printenv PWD'), env: [...base.env, 'PWD=/nowhere'] };
    assert.equal((await agent.exec(sh('printenv PWD'), stale)).stdout, '/tmp\n');
    // What does not run directly goes through the shell, which says why, as it always did.
    for (const command of ['no-such-program-x --y', '/tmp', '/no/such/program']) {
      const direct = await agent.exec(sh(command), simple(command));
      assert.deepEqual(direct, await agent.exec(sh(command), { ...base, cwd: '/tmp' }), command);
      assert.ok(direct.exitCode === 126 || direct.exitCode === 127, `${command}: ${direct.exitCode}`);
      assert.match(direct.stderr, /^\/bin\/sh: 1: /, command);
    }
    // Output, exit code and arguments as through the shell.
    const ls = 'ls -d /tmp /no/such';
    assert.deepEqual(await agent.exec(sh(ls), simple(ls)), await agent.exec(sh(ls), { ...base, cwd: '/tmp' }));
  });

  it('starts background commands and answers with their pid at once', async () => {
    const pid = await agent.execBackground(['/bin/sh', '-c', 'sleep 30'], base);
    assert.ok(pid > 1);
    assert.ok(!gone(pid));
    process.kill(pid, 'SIGKILL');
  });

  it('ends at EOF; as an init it stays and keeps reaping', async () => {
    const plain = await startAgent();
    plain.agent.close();
    assert.equal(await waitExit(plain.child), 0);
    const init = await startAgent('--init');
    init.agent.close();
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(init.child.exitCode, null, 'an init agent exited when its channel closed');
    init.child.kill('SIGKILL');
  });

  it('drops a channel that sends a malformed frame', async () => {
    const bad = await startAgent();
    const stdin = bad.child.stdin!;
    stdin.write(Buffer.from([0xff, 0xff, 0xff, 0x7f, 1]));
    assert.equal(await waitExit(bad.child), 0);
    for (let i = 0; i < 100 && bad.agent.alive; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(bad.agent.alive, false);
  });
});

// The agent as it runs in production: PID 1 of a real crun sandbox, and a second agent
// started by `crun exec` when a new server process adopts the sandbox.
describe('exec agent (in a sandbox)', () => {
  const made = makeTestDriver('agent');
  let driver: LocalDriver = made.driver;
  const limits = { memoryBytes: 128 << 20, cpus: 1, pids: 64, rootDiskBytes: 64 << 20 };
  before(async () => {
    await driver.init();
    await driver.create({ id: 'agent_a', image: 'local/busybox:latest', env: {}, volumes: [], limits });
  });
  after(async () => {
    await driver.delete('agent_a').catch(() => undefined);
    await driver.destroyAll();
    rmSync(made.dataDir, { recursive: true, force: true });
  });

  it('is PID 1, and its channel is out of reach of the sandbox', async () => {
    const r = await driver.exec(
      'agent_a',
      'cat /proc/1/cmdline | tr "\\0" " "; echo; n=0; for f in /proc/1/fd/*; do readlink $f >/dev/null 2>&1 && n=$((n+1)); done; echo $n; echo $(ls /proc/self/fd)',
    );
    const [cmdline, readable, ownFds] = r.stdout.split('\n');
    assert.match(cmdline, /^\/dev\/sandboxd-agent --init/);
    assert.equal(readable, '0', 'the agent is not dumpable: none of its fds can be read or opened');
    assert.deepEqual(
      ownFds
        .trim()
        .split(/\s+/)
        .map(Number)
        .filter((f) => f > 3),
      [],
    );
  });

  it('runs simple commands without the shell where /bin/sh is dash, with the env the shell gives', async () => {
    await driver.create({ id: 'agent_d', image: 'local/debian:bookworm', env: { A: 'b' }, volumes: [], limits });
    try {
      const ppid = async (id: string) => {
        const r = await driver.exec(id, 'cat /proc/self/stat');
        return Number(r.stdout.slice(r.stdout.lastIndexOf(')') + 2).split(' ')[1]);
      };
      // dash forks even the last command of `-c`: the agent's own child ran without it.
      assert.equal(await ppid('agent_d'), 1, "the command is the agent's child");
      const env = (await driver.exec('agent_d', 'env')).stdout.split('\n').sort();
      const viaShell = (await driver.exec('agent_d', 'env | cat')).stdout.split('\n').sort();
      assert.deepEqual(env, viaShell);
      assert.ok(env.includes('A=b') && env.includes('PWD=/root'), env.join(' '));
      const missing = await driver.exec('agent_d', 'no-such-program --x');
      assert.equal(missing.exitCode, 127);
      assert.match(missing.stderr, /no-such-program: not found/);
    } finally {
      await driver.delete('agent_d');
    }
  });

  it('after a server restart a new agent serves execs, and is replaced when killed from inside', async () => {
    await driver.close();
    driver = new LocalDriver(made.options);
    await driver.init();
    assert.deepEqual((await driver.recover()).adopted, ['agent_a']);
    const first = await driver.exec('agent_a', 'echo again');
    assert.equal(first.stdout, 'again\n');
    // The adopted sandbox's PID 1 lost its channel; a second agent runs the commands now.
    const agentPids =
      // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell parameter expansion, not a template
      'for f in /proc/[0-9]*/cmdline; do [ "$(head -c 19 $f)" = /dev/sandboxd-agent ] && p=${f#/proc/} && echo ${p%/cmdline}; done';
    const agents = (await driver.exec('agent_a', agentPids)).stdout.trim().split('\n');
    assert.equal(agents.length, 2, `agents: ${agents}`);
    const killed = await driver.exec(
      'agent_a',
      `for p in $(${agentPids}); do [ $p != 1 ] && kill -9 $p; done; sleep 5`,
    );
    assert.equal(killed.exitCode, 137, 'the command running when its agent died answers as killed');
    assert.equal((await driver.exec('agent_a', 'echo replaced')).stdout, 'replaced\n');
  });

  it("without the agent, commands run through the runtime's own exec with the same results", async () => {
    await driver.close();
    driver = new LocalDriver({ ...made.options, execAgent: false });
    await driver.init();
    await driver.recover();
    assert.deepEqual(await driver.exec('agent_a', 'echo out; echo err >&2; exit 3'), {
      stdout: 'out\n',
      stderr: 'err\n',
      exitCode: 3,
      truncated: false,
      timedOut: false,
    });
    const slow = await driver.exec('agent_a', 'sleep 30', { timeoutMs: 300 });
    assert.equal(slow.exitCode, 124);
    const { pid } = await driver.execBackground('agent_a', 'sleep 30');
    assert.ok(pid > 1);
    const agents = (
      await driver.exec(
        'agent_a',
        'for f in /proc/[0-9]*/cmdline; do [ "$(head -c 19 $f)" = /dev/sandboxd-agent ] && echo $f; done',
      )
    ).stdout
      .trim()
      .split('\n');
    assert.deepEqual(agents, ['/proc/1/cmdline'], 'no second agent was started');
  });
});
