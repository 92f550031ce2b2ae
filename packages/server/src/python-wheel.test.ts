import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  createPythonWheel,
  loadPythonWheel,
  PYTHON_PACKAGE_DIR,
  PyProjectError,
  parseToml,
  readPyProject,
  zipFiles,
} from './python-wheel.js';

/** Debian's Python, which has the zipfile module (the tests read wheels with it, as pip does). */
const PYTHON = '/usr/bin/python3';
const noPython = existsSync(PYTHON) ? false : `${PYTHON} is missing`;

/**
 * What Python's zipfile reads from a wheel: for each entry its name, date, mode and bytes
 * (base64), after `testzip()` checked every CRC; and whether each RECORD line's hash and
 * size match the file.
 */
function readWithPython(wheel: Buffer) {
  const script = `
import base64, csv, hashlib, io, json, sys, zipfile
z = zipfile.ZipFile(io.BytesIO(sys.stdin.buffer.read()))
assert z.testzip() is None, "bad CRC"
entries = [{"name": i.filename, "date": list(i.date_time), "mode": i.external_attr >> 16,
            "method": i.compress_type, "data": base64.b64encode(z.read(i)).decode()} for i in z.infolist()]
record_name = [n for n in z.namelist() if n.endswith(".dist-info/RECORD")][0]
rows = list(csv.reader(io.StringIO(z.read(record_name).decode())))
checked = []
for path, hash_, size in rows:
    if path == record_name:
        checked.append({"path": path, "empty": hash_ == "" and size == ""})
        continue
    algo, _, want = hash_.partition("=")
    data = z.read(path)
    got = base64.urlsafe_b64encode(hashlib.new(algo, data).digest()).rstrip(b"=").decode()
    checked.append({"path": path, "algo": algo, "ok": got == want and int(size) == len(data)})
print(json.dumps({"entries": entries, "record": checked}))
`;
  const out = execFileSync(PYTHON, ['-c', script], { input: wheel }).toString();
  return JSON.parse(out) as {
    entries: Array<{ name: string; date: number[]; mode: number; method: number; data: string }>;
    record: Array<{ path: string; algo?: string; ok?: boolean; empty?: boolean }>;
  };
}

const text = (e: { data: string }) => Buffer.from(e.data, 'base64').toString();

const PYPROJECT = `# a pyproject as a project writes it
[build-system]
requires = ["setuptools>=66", 'wheel']   # comment after a value
build-backend = "setuptools.build_meta"

[project]
name = "fixture-pkg"
version = "1.2.3"
description = "A \\"fixture\\" for the wheel builder \\u2713"
requires-python = ">=3.10"
readme = "README.md"
license = { text = "MIT" }
authors = [{ name = "Someone", email = "someone@example.com" }]
keywords = []
classifiers = [
  "Programming Language :: Python :: 3",
  # a comment in an array
  "Typing :: Typed",
]
dependencies = [
  "httpx>=0.23",
  "websockets>=10.4",
]

[project.optional-dependencies]
test = ["pytest>=7.2"]

[project.urls]
Homepage = "http://localhost:8080/"

[tool.mypy]
strict = true
python_version = "3.10"
warn_unused_configs = true
max-line = 120

[tool.pytest.ini_options]
asyncio_mode = "auto"
testpaths = ["tests"]
`;

describe('pyproject.toml reader', () => {
  it('reads the TOML a pyproject uses: tables, strings with escapes, arrays over lines, inline tables, booleans, integers', () => {
    const doc = parseToml(PYPROJECT) as any;
    assert.deepEqual(doc['build-system'].requires, ['setuptools>=66', 'wheel']);
    assert.equal(doc.project.description, 'A "fixture" for the wheel builder \u2713');
    assert.deepEqual(doc.project.license, { text: 'MIT' });
    assert.deepEqual(doc.project.authors, [{ name: 'Someone', email: 'someone@example.com' }]);
    assert.deepEqual(doc.project.classifiers, ['Programming Language :: Python :: 3', 'Typing :: Typed']);
    assert.deepEqual(doc.project['optional-dependencies'], { test: ['pytest>=7.2'] });
    assert.equal(doc.tool.mypy.strict, true);
    assert.equal(doc.tool.mypy['max-line'], 120);
    assert.equal(doc.tool.pytest.ini_options.asyncio_mode, 'auto');
    assert.deepEqual(parseToml('a.b = 1\na.c = "x"\n"quoted key" = \'lit\\eral\''), {
      a: { b: 1, c: 'x' },
      'quoted key': 'lit\\eral',
    });
    assert.deepEqual(readPyProject(PYPROJECT), {
      name: 'fixture-pkg',
      version: '1.2.3',
      description: 'A "fixture" for the wheel builder \u2713',
      requiresPython: '>=3.10',
      dependencies: ['httpx>=0.23', 'websockets>=10.4'],
      readme: 'README.md',
    });
  });

  it('refuses what it does not understand, naming the line, instead of misreading it', () => {
    const refused: Array<[string, RegExp]> = [
      ['[project]\ndescription = """two\nlines"""', /line 2: multi-line strings/],
      ["[project]\ndescription = '''x'''", /line 2: multi-line strings/],
      ['[project]\nx = 1.5', /line 2: unsupported value "1.5"/],
      ['[project]\nx = 1979-05-27', /line 2: unsupported value/],
      ['[[project.authors]]\nname = "x"', /line 1: arrays of tables/],
      ['[project]\nname = "a"\nname = "b"', /line 3: key project.name defined twice/],
      ['[project]\n[project]', /line 2: table \[project\] defined twice/],
      ['[project]\nname = "a', /line 2: unterminated string/],
      ['[project]\nname = "a" "b"', /line 2: unexpected/],
      ['[project]\nname = "\\q"', /line 2: unknown escape/],
      ['[project]\ndeps = ["a" "b"]', /line 2: expected , or \]/],
      ['[project]\n= 1', /line 2: expected a key/],
      ['[project]\nname 1', /line 2: expected = after the key/],
      ['[project\nname = 1', /line 1: expected \] after the table name/],
      ['a = 1\n[a.b]', /line 2: a is not a table/],
      ['a = "x"\na.b = 1', /line 2: a is not a table/],
    ];
    for (const [toml, message] of refused) assert.throws(() => parseToml(toml), message, toml);

    const base = '[project]\nname = "p"\nversion = "1.0"\n';
    const invalid: Array<[string, RegExp]> = [
      ['[tool.x]\na = 1', /no \[project\] table/],
      ['[project]\nversion = "1.0"', /name is required/],
      ['[project]\nname = "p"', /version is required/],
      ['[project]\nname = "p"\ndynamic = ["version"]', /dynamic = \["version"\] is not supported/],
      ['[project]\nname = "-p"\nversion = "1"', /not a valid distribution name/],
      ['[project]\nname = "p"\nversion = "one"', /not a plain PEP 440 version/],
      [`${base}dependencies = "httpx"`, /dependencies must be an array/],
      [`${base}dependencies = [1]`, /dependencies\[\] must be a string/],
      [`${base}description = "two\\nlines"`, /description must be one line/],
      [`${base}readme = { file = "README.md" }`, /readme must be a file name/],
    ];
    for (const [toml, message] of invalid) {
      assert.throws(
        () => readPyProject(toml),
        (e: unknown) => e instanceof PyProjectError && message.test(e.message),
        toml,
      );
    }
  });
});

describe('zip writer', { skip: noPython }, () => {
  it('writes what Python and unzip read: deflated and stored entries, UTF-8 names, an empty file', () => {
    const files = [
      { name: 'a/compressible.txt', data: Buffer.from('abc'.repeat(1000)) },
      { name: 'a/tiny', data: Buffer.from('x') },
      { name: 'empty', data: Buffer.alloc(0) },
      { name: 'ünïcode.txt', data: Buffer.from('é') },
    ];
    const zip = zipFiles(files);
    // Info-ZIP's own test too, where it is installed (not a set-up package).
    if (existsSync('/usr/bin/unzip')) {
      const tmp = mkdtempSync(join(tmpdir(), 'sandboxd-zip-'));
      try {
        writeFileSync(join(tmp, 'x.zip'), zip);
        const tested = execFileSync('/usr/bin/unzip', ['-t', join(tmp, 'x.zip')]).toString();
        assert.match(tested, /No errors detected/);
      } finally {
        rmSync(tmp, { recursive: true, force: true });
      }
    }
    const script = `
import io, json, sys, zipfile
z = zipfile.ZipFile(io.BytesIO(sys.stdin.buffer.read()))
assert z.testzip() is None
print(json.dumps([[i.filename, i.compress_type, i.file_size, list(i.date_time), oct(i.external_attr >> 16), z.read(i).hex()] for i in z.infolist()]))
`;
    const got = JSON.parse(execFileSync(PYTHON, ['-c', script], { input: zip }).toString());
    assert.deepEqual(
      got.map((g: unknown[]) => [g[0], g[1], g[2], g[5]]),
      [
        ['a/compressible.txt', 8, 3000, Buffer.from('abc'.repeat(1000)).toString('hex')],
        ['a/tiny', 0, 1, '78'],
        ['empty', 0, 0, ''],
        ['ünïcode.txt', 0, 2, 'c3a9'],
      ],
    );
    for (const g of got) {
      assert.deepEqual(g[3], [1980, 1, 1, 0, 0, 0]);
      assert.equal(g[4], '0o100644');
    }
  });
});

describe('Python wheel', { skip: noPython }, () => {
  let dir = '';
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'sandboxd-wheel-'));
    const put = (path: string, data: string) => {
      mkdirSync(dirname(join(dir, path)), { recursive: true });
      writeFileSync(join(dir, path), data);
    };
    put('pyproject.toml', PYPROJECT);
    put('README.md', '# fixture\n\nThe long description.\n');
    put('fixture_pkg/__init__.py', 'from ._version import __version__\n');
    put('fixture_pkg/_version.py', '__version__ = "1.2.3"\n');
    put('fixture_pkg/py.typed', '');
    put('fixture_pkg/sub/__init__.py', '');
    put('fixture_pkg/sub/mod.py', 'X = 1\n');
    put('fixture_pkg/sub/mod.pyi', 'X: int\n');
    put('fixture_pkg/__pycache__/mod.cpython-311.pyc', 'bytecode');
    put('fixture_pkg/sub/__pycache__/mod.cpython-311.pyc', 'bytecode');
    put('fixture_pkg/notes.txt', 'not a source file');
    put('fixture_pkg/.hidden/x.py', 'hidden');
    put('tests/test_x.py', 'def test_x(): pass\n');
    symlinkSync('/etc/passwd', join(dir, 'fixture_pkg/linked.py'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('is a PEP 427 wheel of the package: its sources, METADATA, WHEEL, top_level.txt and a RECORD that verifies', () => {
    const w = createPythonWheel({ dir });
    assert.equal(w.name, 'fixture-pkg');
    assert.equal(w.version, '1.2.3');
    assert.equal(w.fileName, 'fixture_pkg-1.2.3-py3-none-any.whl');
    const info = 'fixture_pkg-1.2.3.dist-info';
    const names = [
      'fixture_pkg/__init__.py',
      'fixture_pkg/_version.py',
      'fixture_pkg/py.typed',
      'fixture_pkg/sub/__init__.py',
      'fixture_pkg/sub/mod.py',
      'fixture_pkg/sub/mod.pyi',
      `${info}/METADATA`,
      `${info}/WHEEL`,
      `${info}/top_level.txt`,
      `${info}/RECORD`,
    ];
    assert.deepEqual(w.entries, names);
    const z = readWithPython(w.wheel);
    assert.deepEqual(
      z.entries.map((e) => e.name),
      names,
    );
    for (const e of z.entries) {
      assert.deepEqual(e.date, [1980, 1, 1, 0, 0, 0], e.name);
      assert.equal(e.mode, 0o100644, e.name);
    }
    const byName = new Map(z.entries.map((e) => [e.name, e]));
    assert.equal(text(byName.get('fixture_pkg/sub/mod.py')!), 'X = 1\n');
    assert.equal(
      text(byName.get(`${info}/METADATA`)!),
      [
        'Metadata-Version: 2.1',
        'Name: fixture-pkg',
        'Version: 1.2.3',
        'Summary: A "fixture" for the wheel builder \u2713',
        'Requires-Python: >=3.10',
        'Requires-Dist: httpx>=0.23',
        'Requires-Dist: websockets>=10.4',
        'Description-Content-Type: text/markdown',
        '',
        '# fixture',
        '',
        'The long description.',
        '',
      ].join('\n'),
    );
    assert.equal(
      text(byName.get(`${info}/WHEEL`)!),
      'Wheel-Version: 1.0\nGenerator: sandboxd-server (python-wheel.ts)\nRoot-Is-Purelib: true\nTag: py3-none-any\n',
    );
    assert.equal(text(byName.get(`${info}/top_level.txt`)!), 'fixture_pkg\n');
    assert.deepEqual(
      z.record.map((r) => r.path),
      names,
      'RECORD lists every file, itself last',
    );
    for (const r of z.record.slice(0, -1)) assert.deepEqual(r, { path: r.path, algo: 'sha256', ok: true });
    assert.deepEqual(z.record.at(-1), { path: `${info}/RECORD`, empty: true });
    assert.match(text(byName.get(`${info}/RECORD`)!), /^fixture_pkg\/__init__\.py,sha256=[A-Za-z0-9_-]{43},34\n/);
    assert.match(w.sha256, /^[0-9a-f]{64}$/);
    assert.match(w.etag, /^"[\w-]{27}"$/);
  });

  it('makes the same bytes from the same files (times do not matter), other bytes when a file changes', () => {
    const a = createPythonWheel({ dir });
    utimesSync(join(dir, 'fixture_pkg/sub/mod.py'), new Date(2001, 1, 1), new Date(2001, 1, 1));
    const b = createPythonWheel({ dir });
    assert.ok(a.wheel.equals(b.wheel));
    assert.equal(a.etag, b.etag);
    writeFileSync(join(dir, 'fixture_pkg/sub/mod.py'), 'X = 2\n');
    const c = createPythonWheel({ dir });
    assert.notEqual(c.etag, a.etag);
    assert.notEqual(c.sha256, a.sha256);
    writeFileSync(join(dir, 'fixture_pkg/sub/mod.py'), 'X = 1\n');
    assert.ok(createPythonWheel({ dir }).wheel.equals(a.wheel));
  });

  it('fails loudly when the package does not match its metadata', () => {
    const bad = mkdtempSync(join(tmpdir(), 'sandboxd-wheel-bad-'));
    try {
      assert.throws(() => createPythonWheel({ dir: bad }), /pyproject\.toml does not exist/);
      writeFileSync(join(bad, 'pyproject.toml'), '[project]\nname = "other"\nversion = "1.0"\n');
      assert.throws(() => createPythonWheel({ dir: bad }), /import package other\/ \(with __init__\.py\) is missing/);
      mkdirSync(join(bad, 'other'));
      writeFileSync(join(bad, 'other/__init__.py'), '');
      writeFileSync(join(bad, 'other/_version.py'), '__version__ = "0.9"\n');
      assert.throws(
        () => createPythonWheel({ dir: bad }),
        /version 1\.0 differs from other\/_version\.py's __version__ 0\.9/,
      );
      writeFileSync(join(bad, 'other/_version.py'), '__version__ = "1.0"\n');
      assert.equal(createPythonWheel({ dir: bad }).fileName, 'other-1.0-py3-none-any.whl');
      writeFileSync(join(bad, 'pyproject.toml'), '[project]\nname = "other"\nversion = "1.0"\nreadme = "../x.md"\n');
      assert.throws(() => createPythonWheel({ dir: bad }), /readme is outside the package/);
    } finally {
      rmSync(bad, { recursive: true, force: true });
    }
  });

  it("builds the repository's Python SDK, at the TypeScript SDK's version, once per process", async () => {
    const w = await loadPythonWheel();
    assert.equal(await loadPythonWheel(), w);
    const sdkVersion = JSON.parse(readFileSync(join(PYTHON_PACKAGE_DIR, '../sdk/package.json'), 'utf8')).version;
    assert.equal(w.name, 'sandboxd');
    assert.equal(w.version, sdkVersion);
    assert.equal(w.fileName, `sandboxd-${sdkVersion}-py3-none-any.whl`);
    assert.ok(w.entries.includes('sandboxd/__init__.py'));
    assert.ok(w.entries.includes('sandboxd/py.typed'));
    assert.ok(w.entries.includes('sandboxd/_version.py'));
    assert.ok(!w.entries.some((e) => e.includes('__pycache__') || e.startsWith('tests/')));
    const z = readWithPython(w.wheel);
    assert.ok(z.record.every((r) => r.ok || r.empty));
    const metadata = text(z.entries.find((e) => e.name.endsWith('/METADATA'))!);
    assert.match(metadata, /^Requires-Dist: httpx>=0\.23$/m);
    assert.match(metadata, /^Requires-Dist: websockets>=10\.4$/m);
    assert.match(metadata, /^Requires-Python: >=3\.10$/m);
    assert.ok(createPythonWheel().wheel.equals(w.wheel), 'deterministic');
  });
});
