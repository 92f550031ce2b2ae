/**
 * The Python SDK's wheel as a user installs it: Debian's Python makes a venv (with the
 * system's site-packages, where Debian's httpx and websockets are), and that venv's pip
 * installs the wheel from the running server's URL, with no index. The package then imports
 * at the server's version, and mypy --strict type-checks examples/hello.py against it. Both
 * URLs: the versioned one and `/sdk/python`, which redirects to it (resolved first: pip needs
 * the wheel's name in the URL it is given). Skipped with the reason when Debian's python3 with
 * venv and pip is missing (set-up's test packages install them).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { startServer, type Server } from './harness.js';
import { PYTHON, pythonUnavailable, pythonUserEnv } from './python-support.js';

const ROOT = resolve(fileURLToPath(import.meta.url), '../../..');
const skip = pythonUnavailable();

/** Runs a program to its end (bounded); resolves with its exit code and output. */
function run(file: string, args: string[], env: NodeJS.ProcessEnv) {
  return new Promise<{ code: number; stdout: string; stderr: string }>((res) => {
    execFile(file, args, { env, timeout: 180_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) =>
      res({ code: err ? Number((err as { code?: unknown }).code ?? 1) || 1 : 0, stdout, stderr }),
    );
  });
}

describe('Python wheel installed with pip from the server', { skip: skip ?? false, timeout: 300_000 }, () => {
  let s: Server;
  let tmp = '';
  const version = JSON.parse(readFileSync(join(ROOT, 'packages/sdk/package.json'), 'utf8')).version as string;
  before(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'sandboxd-wheel-pip-'));
    s = await startServer();
  });
  after(async () => {
    await s?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  /** A venv of Debian's Python that sees the system's packages (httpx, websockets). */
  const makeVenv = async () => {
    const venv = mkdtempSync(join(tmp, 'venv-'));
    const made = await run(PYTHON, ['-m', 'venv', '--system-site-packages', venv], pythonUserEnv(tmp));
    assert.equal(made.code, 0, made.stderr);
    return venv;
  };

  /** pip installs `url` with no index into `venv`; the package imports from the venv at the server's version. */
  const installAndImport = async (venv: string, url: string) => {
    const env = pythonUserEnv(tmp);
    const pip = await run(join(venv, 'bin/pip'), ['install', '--no-index', '--no-deps', url], env);
    const said = `pip install ${url}: exit ${pip.code}\n${pip.stdout}\n${pip.stderr}`;
    assert.equal(pip.code, 0, said);
    assert.match(pip.stdout, new RegExp(`Successfully installed sandboxd-${version.replaceAll('.', '\\.')}`), said);

    const py = await run(
      join(venv, 'bin/python'),
      ['-c', 'import sandboxd, os; print(sandboxd.__version__); print(os.path.dirname(sandboxd.__file__))'],
      env,
    );
    assert.equal(py.code, 0, py.stderr);
    const [printed, where] = py.stdout.trim().split('\n');
    assert.equal(printed, version);
    assert.ok(where.startsWith(`${venv}/`), `imported from the venv, not the clone: ${where}`);
    assert.ok(existsSync(join(where, 'py.typed')), 'the typing marker came along');
  };

  it("pip installs the versioned URL into a venv with no index; it imports at the server's version, its dependencies met by Debian's", async () => {
    const venv = await makeVenv();
    await installAndImport(venv, `${s.baseUrl}/sdk/sandboxd-${version}-py3-none-any.whl`);
    const env = pythonUserEnv(tmp);
    const show = await run(join(venv, 'bin/pip'), ['show', '--files', 'sandboxd'], env);
    assert.equal(show.code, 0, show.stderr);
    assert.match(show.stdout, /^Requires: httpx, websockets$/m);
    assert.match(show.stdout, /^ {2}sandboxd\/__init__\.py$/m);
    // Each Requires-Dist of the installed wheel holds for what the venv imports (Debian's
    // httpx and websockets): read with the packaging library pip carries.
    const deps = await run(
      join(venv, 'bin/python'),
      [
        '-c',
        [
          'from importlib.metadata import requires, version',
          'from pip._vendor.packaging.requirements import Requirement',
          'for r in map(Requirement, requires("sandboxd")):',
          '    v = version(r.name)',
          '    print(r.name, v, r.specifier.contains(v))',
        ].join('\n'),
      ],
      env,
    );
    assert.equal(deps.code, 0, deps.stderr);
    const lines = deps.stdout.trim().split('\n');
    assert.deepEqual(
      lines.map((l) => [l.split(' ')[0], l.split(' ')[2]]),
      [
        ['httpx', 'True'],
        ['websockets', 'True'],
      ],
      deps.stdout,
    );
  });

  it('a type checker sees the installed wheel as typed: mypy --strict passes examples/hello.py against it', {
    skip: existsSync('/usr/lib/python3/dist-packages/mypy') ? false : 'mypy is missing (apt install mypy)',
  }, async () => {
    const venv = await makeVenv();
    await installAndImport(venv, `${s.baseUrl}/sdk/sandboxd-${version}-py3-none-any.whl`);
    // The venv's python runs Debian's mypy, which then reads the venv's site-packages (the
    // wheel's py.typed), not the clone's sources.
    const mypy = await run(
      join(venv, 'bin/python'),
      ['-m', 'mypy', '--strict', '--cache-dir', join(tmp, 'mypy-cache'), join(ROOT, 'examples/hello.py')],
      pythonUserEnv(tmp),
    );
    assert.equal(mypy.code, 0, `${mypy.stdout}\n${mypy.stderr}`);
    assert.match(mypy.stdout, /^Success: no issues found in 1 source file$/m);
  });

  it('/sdk/python leads to the same wheel: its redirect, followed by Python, ends at the file name pip installs from', async () => {
    // pip tells a wheel from a source archive by the name at the end of the URL it is given,
    // before any redirect: `pip install <server>/sdk/python` itself takes the download for a
    // source tree. So the stable URL is resolved first, as a script of the user would.
    const venv = await makeVenv();
    const env = pythonUserEnv(tmp);
    const resolved = await run(
      join(venv, 'bin/python'),
      ['-c', 'import sys, urllib.request as u; print(u.urlopen(sys.argv[1]).url)', `${s.baseUrl}/sdk/python`],
      env,
    );
    assert.equal(resolved.code, 0, resolved.stderr);
    const url = resolved.stdout.trim();
    assert.equal(url, `${s.baseUrl}/sdk/sandboxd-${version}-py3-none-any.whl`);
    await installAndImport(venv, url);
  });
});
