/**
 * E2B parity around the code interpreter (issue 34), with the unchanged `e2b` SDK against
 * sandboxd on the real runtime: what E2B-style programs rely on beyond the basic calls.
 * Files written as `user` where their directories do not exist yet (envd makes them as root
 * and hands them to the user), file metadata and entries in watch events (envd 0.6.2/0.6.3),
 * commands of a sandbox killed while they run, and the MCP gateway option.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { type FilesystemEvent, FilesystemEventType, Sandbox, SandboxError, TimeoutError } from 'e2b';
import { RUNTIME } from '../harness.js';
import { type E2bEnv, startE2b } from './support.js';

/** Resolves once `cond()` holds (polled), or fails after `ms`. */
async function until(cond: () => boolean | Promise<boolean>, what: string, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('E2B parity: files, metadata, killed sandboxes, MCP (real runtime)', {
  skip: RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local',
  timeout: 600_000,
}, () => {
  let e: E2bEnv;
  let sbx: Sandbox;
  /** Runs `command` as root through sandboxd's own exec API. */
  const exec = async (command: string, id = sbx.sandboxId) => {
    const r = await e.s.api('POST', `/api/v1/sandboxes/${id}/exec`, { key: e.key, body: { command } });
    assert.equal(r.status, 200, r.text);
    return r.body as { stdout: string; stderr: string; exitCode: number };
  };

  before(async () => {
    e = await startE2b();
    sbx = await Sandbox.create({ timeoutMs: 600_000 }); // `base`: local/debian as `user`
  });
  after(async () => {
    await sbx?.kill().catch(() => undefined);
    await e?.s.stop();
  });

  it('a write as user makes missing directories outside its home, as envd (root) does, handed to the user', async () => {
    const w = await sbx.files.write('/data/x.txt', 'x');
    assert.equal(w.path, '/data/x.txt');
    const deep = await sbx.files.write('/data/a/b/c.txt', 'c', { user: 'user' });
    assert.equal(deep.path, '/data/a/b/c.txt');
    assert.equal(
      (await exec("stat -c '%U:%G %a %n' /data /data/a /data/a/b /data/x.txt /data/a/b/c.txt")).stdout,
      'user:user 755 /data\nuser:user 755 /data/a\nuser:user 755 /data/a/b\n' +
        'user:user 644 /data/x.txt\nuser:user 644 /data/a/b/c.txt\n',
    );
    assert.equal(await sbx.files.read('/data/a/b/c.txt'), 'c');
    // Existing directories keep their owner: `/` and /srv (Debian's, root's) stay root's.
    await sbx.files.write('/srv/app/main.py', 'print(1)');
    assert.equal((await exec("stat -c '%U %n' / /srv /srv/app")).stdout, 'root /\nroot /srv\nuser /srv/app\n');
    // makeDir too, the directory itself included; an existing one is still false.
    assert.equal(await sbx.files.makeDir('/work/one/two'), true);
    assert.equal((await exec("stat -c '%U:%G %a' /work /work/one /work/one/two")).stdout, 'user:user 755\n'.repeat(3));
    assert.equal(await sbx.files.makeDir('/work/one'), false);
    // A signed upload URL (no token) writes the same way.
    const url = await sbx.uploadUrl('/uploads/u/up.txt', { useSignatureExpiration: 60_000 });
    const form = new FormData();
    form.append('file', new Blob(['up']), 'up.txt');
    const r = await fetch(url, { method: 'POST', body: form, headers: { 'E2b-Sandbox-Id': sbx.sandboxId } });
    assert.equal(r.status, 200, await r.clone().text());
    assert.equal(
      (await exec("stat -c '%U %n' /uploads /uploads/u /uploads/u/up.txt")).stdout,
      'user /uploads\nuser /uploads/u\nuser /uploads/u/up.txt\n',
    );
    // As root nothing changes hands.
    await sbx.files.write('/rootdata/r.txt', 'r', { user: 'root' });
    assert.equal((await exec("stat -c '%U' /rootdata /rootdata/r.txt")).stdout, 'root\nroot\n');
  });

  it('what the user could not reach stays refused: nothing is made under a directory it cannot search', async () => {
    await assert.rejects(sbx.files.write('/root/made/x.txt', 'x'), (err: Error) => {
      assert.ok(err instanceof SandboxError, String(err));
      assert.match(err.message, /[Pp]ermission denied/);
      return true;
    });
    await assert.rejects(sbx.files.makeDir('/root/made'), SandboxError);
    assert.equal((await exec('ls -A /root | grep -c made || true')).stdout, '0\n');
    // A file in an existing directory the user may not write stays the user's own call (403).
    await assert.rejects(sbx.files.write('/etc/not-mine.txt', 'x'), SandboxError);
  });

  it('file metadata: written with the file, returned by write, list and getInfo, replaced on overwrite', async () => {
    const w = await sbx.files.write('meta/a.txt', 'a', { metadata: { owner: 'agent-7', 'run-id': 'r 42' } });
    assert.deepEqual(w.metadata, { owner: 'agent-7', 'run-id': 'r 42' });
    assert.deepEqual((await sbx.files.getInfo('meta/a.txt')).metadata, { owner: 'agent-7', 'run-id': 'r 42' });
    await sbx.files.write('meta/plain.txt', 'p');
    const listed = await sbx.files.list('meta');
    assert.deepEqual(
      listed.map((x) => [x.name, x.metadata]),
      [
        ['a.txt', { owner: 'agent-7', 'run-id': 'r 42' }],
        ['plain.txt', undefined],
      ],
    );
    // Kept as the file's `user.e2b.*` extended attributes, as envd keeps them.
    const py = await exec(
      `python3 -c "import os; print(sorted((k, os.getxattr('/home/user/meta/a.txt', k).decode()) for k in os.listxattr('/home/user/meta/a.txt')))"`,
    );
    assert.equal(py.stdout, "[('user.e2b.owner', 'agent-7'), ('user.e2b.run-id', 'r 42')]\n", py.stderr);
    // An overwrite replaces the whole set (none given: none left).
    const again = await sbx.files.write('meta/a.txt', 'b', { metadata: { owner: 'agent-8' } });
    assert.deepEqual(again.metadata, { owner: 'agent-8' });
    assert.equal((await sbx.files.write('meta/a.txt', 'c')).metadata, undefined);
    // Several files in one upload, streamed (octet-stream) too.
    const many = await sbx.files.write(
      [
        { path: 'meta/m1.txt', data: '1' },
        { path: 'meta/m2.txt', data: '2' },
      ],
      { metadata: { batch: 'b1' } },
    );
    assert.deepEqual(
      many.map((x) => x.metadata),
      [{ batch: 'b1' }, { batch: 'b1' }],
    );
    const streamed = await sbx.files.write('meta/s.txt', new Blob(['s']).stream(), { metadata: { kind: 'stream' } });
    assert.deepEqual(streamed.metadata, { kind: 'stream' });
    // Bad metadata is refused before anything is written (envd's 400).
    const res = await fetch(`${e.s.baseUrl}/files?path=/home/user/meta/bad.txt`, {
      method: 'POST',
      headers: {
        'E2b-Sandbox-Id': sbx.sandboxId,
        'X-Access-Token': (sbx as unknown as { envdAccessToken: string }).envdAccessToken,
        'content-type': 'application/octet-stream',
        [`X-Metadata-${'k'.repeat(300)}`]: 'v',
      },
      body: 'x',
    });
    assert.equal(res.status, 400, await res.text());
    assert.equal(await sbx.files.exists('meta/bad.txt'), false);
  });

  it("metadata on a volume's file system and on /dev/shm (a tmpfs) too", async () => {
    const c = await e.s.api('POST', '/api/v1/sandboxes', {
      key: e.key,
      body: { image: 'local/debian:bookworm', volumes: { '/vol': { name: 'e2b_parity_meta', sizeGb: 1 } } },
    });
    assert.equal(c.status, 201, c.text);
    try {
      const other = await Sandbox.connect(c.body.sandbox.id);
      for (const path of ['/vol/m.txt', '/dev/shm/m.txt']) {
        const w = await other.files.write(path, 'v', { metadata: { where: path }, user: 'root' });
        assert.deepEqual(w.metadata, { where: path }, path);
        assert.deepEqual((await other.files.getInfo(path)).metadata, { where: path }, path);
      }
    } finally {
      await e.s.api('DELETE', `/api/v1/sandboxes/${c.body.sandbox.id}`, { key: e.key });
      await e.s.api('DELETE', '/api/v1/volumes/e2b_parity_meta', { key: e.key });
    }
  });

  it('watch events carry the entry when asked (includeEntry), with its metadata', async () => {
    await sbx.files.makeDir('watched');
    const events: FilesystemEvent[] = [];
    const h = await sbx.files.watchDir('watched', (ev) => void events.push(ev), { includeEntry: true });
    try {
      await sbx.files.write('watched/f.txt', 'hello', { metadata: { tag: 't1' } });
      await until(
        () => events.some((ev) => ev.name === 'f.txt' && ev.entry !== undefined),
        `an event with an entry in ${JSON.stringify(events)}`,
      );
      const withEntry = events.filter((ev) => ev.name === 'f.txt' && ev.entry);
      const last = withEntry[withEntry.length - 1].entry!;
      assert.equal(last.path, '/home/user/watched/f.txt');
      assert.equal(last.type, 'file');
      assert.equal(last.owner, 'user');
      assert.deepEqual(last.metadata, { tag: 't1' });
      await exec('rm /home/user/watched/f.txt');
      await until(() => events.some((ev) => ev.type === FilesystemEventType.REMOVE), 'the remove event');
      assert.equal(events.find((ev) => ev.type === FilesystemEventType.REMOVE)?.entry, undefined);
    } finally {
      await h.stop();
    }
    // Without includeEntry there is none.
    const plain: FilesystemEvent[] = [];
    const h2 = await sbx.files.watchDir('watched', (ev) => void plain.push(ev));
    try {
      await sbx.files.write('watched/g.txt', 'g');
      await until(() => plain.some((ev) => ev.name === 'g.txt'), 'an event of g.txt');
      assert.ok(plain.every((ev) => ev.entry === undefined));
    } finally {
      await h2.stop();
    }
  });

  it('a command whose sandbox is killed while it runs ends with TimeoutError, in the foreground and in the background', async () => {
    const victim = await Sandbox.create({ timeoutMs: 120_000 });
    const started: string[] = [];
    // Its end is caught at once: the kill may end it before the assertions below look.
    const foreground = victim.commands.run('echo up; sleep 60', { onStdout: (d) => void started.push(d) }).then(
      (r) => ({ r }),
      (e: unknown) => ({ e }),
    );
    const background = await victim.commands.run('sleep 60', { background: true });
    const backgroundEnd = background.wait().then(
      (r) => ({ r }),
      (e: unknown) => ({ e }),
    );
    await until(() => started.length > 0, 'the foreground command to start');
    // Another client kills it (E2B's `Sandbox.kill(id)`), as a user's cleanup job would.
    assert.equal(await Sandbox.kill(victim.sandboxId), true);
    const check = (what: string) => (err: unknown) => {
      assert.ok(err instanceof TimeoutError, `${what}: ${String(err)} (${(err as Error)?.constructor?.name})`);
      assert.match((err as Error).message, /sandbox/i);
      return true;
    };
    for (const [what, end] of [
      ['foreground', foreground],
      ['background', backgroundEnd],
    ] as const) {
      const got = await end;
      assert.ok('e' in got, `${what}: ended without an error`);
      check(what)(got.e);
    }
  });

  it("the mcp option is taken as E2B takes it; the SDK's gateway start fails as in a template without MCP", async () => {
    const config = { exa: { apiKey: 'not-a-key' } };
    // No template named: the SDK picks E2B's `mcp-gateway`, which this server does not have.
    await assert.rejects(Sandbox.create({ mcp: config }), (err: Error) => {
      assert.ok(err instanceof SandboxError, String(err));
      assert.match(err.message, /template 'mcp-gateway' not found/);
      return true;
    });
    // A template without the gateway: the create is taken, the SDK's `mcp-gateway --config ...`
    // fails in it, and the SDK kills the sandbox and raises E2B's error.
    const running = async () => (await Sandbox.list({ query: { state: ['running'] } }).nextItems()).length;
    const before = await running();
    await assert.rejects(Sandbox.create('base', { mcp: config, timeoutMs: 60_000 }), (err: Error) => {
      assert.ok(err instanceof SandboxError, String(err));
      assert.match(err.message, /^Failed to start MCP gateway: .*mcp-gateway: command not found/s);
      return true;
    });
    assert.equal(await running(), before, 'the SDK killed the sandbox it made');
  });

  it("base gives `user` passwordless sudo, and sudo's root is the sandbox's root, no more", async () => {
    assert.equal((await sbx.commands.run('id -un; sudo -n id -u')).stdout, 'user\n0\n');
    assert.equal((await sbx.commands.run('sudo -n true && sudo -n whoami', { user: 'user' })).stdout, 'root\n');
    // What root through sudo holds, against root as sandboxd's API runs it: the same ids,
    // capabilities (bounded), seccomp filter and namespaces. The escape suites
    // (test/security/) prove that root cannot reach the host.
    const probe =
      "grep -E '^(Uid|Gid|CapInh|CapPrm|CapEff|CapBnd|CapAmb|Seccomp|Seccomp_filters):' /proc/self/status; " +
      'for n in user pid mnt net uts ipc cgroup; do readlink /proc/self/ns/$n; done; cat /proc/self/uid_map';
    const viaSudo = await sbx.commands.run(`sudo -n sh -c '${probe.replaceAll("'", "'\\''")}'`);
    const viaApi = await exec(probe);
    assert.equal(viaSudo.stdout, viaApi.stdout);
    assert.match(viaSudo.stdout, /^Uid:\t0\t0\t0\t0$/m);
    assert.match(viaSudo.stdout, /^Seccomp:\t2$/m, 'the seccomp filter holds');
    const map = viaSudo.stdout.trim().split('\n').pop()!.trim().split(/\s+/).map(Number);
    assert.equal(map[0], 0);
    assert.notEqual(map[1], 0, "the sandbox's root is not the host's");
    // Privileges outside the sandbox's set stay refused to it.
    const denied = await sbx.commands.run(
      'sudo -n mount -t tmpfs none /mnt 2>&1; echo mount=$?; sudo -n ip link add d0 type dummy 2>&1; echo link=$?',
    );
    assert.match(denied.stdout, /mount=[1-9]/);
    assert.match(denied.stdout, /link=[1-9]/);
    // Without the image's label (local/busybox) setuid programs stay powerless (no_new_privs).
    const bb = await e.s.api('POST', '/api/v1/sandboxes', { key: e.key, body: { image: 'local/busybox:latest' } });
    assert.equal(bb.status, 201, bb.text);
    const nnp = await exec('grep NoNewPrivs /proc/self/status', bb.body.sandbox.id);
    assert.equal(nnp.stdout, 'NoNewPrivs:\t1\n');
    assert.equal((await exec('grep NoNewPrivs /proc/self/status')).stdout, 'NoNewPrivs:\t0\n');
    // A start after stop keeps it (the sandbox's record has it).
    const id = bb.body.sandbox.id;
    const deb = await e.s.api('POST', '/api/v1/sandboxes', { key: e.key, body: { image: 'local/debian:bookworm' } });
    assert.equal(deb.status, 201, deb.text);
    const debId = deb.body.sandbox.id;
    for (const op of ['stop', 'start']) {
      const r = await e.s.api('POST', `/api/v1/sandboxes/${debId}/${op}`, { key: e.key, body: {} });
      assert.equal(r.status, 200, `${op}: ${r.text}`);
    }
    assert.equal((await exec('setpriv --reuid=1000 --regid=1000 --clear-groups sudo -n id -u', debId)).stdout, '0\n');
    for (const x of [id, debId]) await e.s.api('DELETE', `/api/v1/sandboxes/${x}`, { key: e.key });
  });
});
