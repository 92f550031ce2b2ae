/**
 * The Python SDK as a wheel, which the server serves at
 * `GET /sdk/sandboxd-<version>-py3-none-any.whl` so that a user with only the server's
 * address can `pip install http://<server>/sdk/sandboxd-<version>-py3-none-any.whl` (the
 * dependencies, httpx and websockets, come from wherever the user's pip finds them).
 *
 * The wheel is PEP 427's layout, built here without Python or a build backend: the files of
 * packages/python/sandboxd (`.py`, `.pyi`, `py.typed`; no `__pycache__`), then
 * `sandboxd-<version>.dist-info/` with METADATA (core metadata 2.1 from pyproject.toml's
 * `[project]` table), WHEEL, top_level.txt and RECORD (sha256 and size of every file; its own
 * line without either). It is deterministic: entries in a fixed order, every time
 * 1980-01-01 00:00, every mode 0644, so the same files give the same bytes and ETag.
 *
 * pyproject.toml is read by a small strict reader of the TOML it uses (tables, strings,
 * arrays, inline tables, booleans, integers): anything else fails loudly rather than be
 * misread.
 */
import { createHash } from 'node:crypto';
import { existsSync, lstatSync, readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { crc32, deflateRawSync } from 'node:zlib';

/** packages/python in this repository. */
export const PYTHON_PACKAGE_DIR = resolve(fileURLToPath(import.meta.url), '../../../python');

/** The built wheel. */
export interface PythonWheel {
  /** The distribution name (`sandboxd`). */
  name: string;
  version: string;
  /** PEP 427's file name, `sandboxd-0.3.0-py3-none-any.whl`: pip needs the URL to end in it. */
  fileName: string;
  wheel: Buffer;
  /** A strong ETag (quoted) of the wheel's bytes. */
  etag: string;
  /** The wheel's sha256 (hex), as pip's `#sha256=` and hash-checking mode take it. */
  sha256: string;
  /** The archive's entries in order (package files, then the dist-info files, RECORD last). */
  entries: string[];
}

/** The few fields of pyproject.toml's `[project]` table a wheel needs. */
export interface PyProject {
  name: string;
  version: string;
  description: string | null;
  requiresPython: string | null;
  dependencies: string[];
  /** `readme` when it names a file (relative to pyproject.toml). */
  readme: string | null;
}

// ---------------------------------------------------------------------------------------
// pyproject.toml: a strict reader of the TOML subset it uses

type TomlValue = string | number | boolean | TomlValue[] | { [k: string]: TomlValue };
type TomlTable = { [k: string]: TomlValue };

/** A TOML document pyproject.toml's reader refuses: where and why. */
export class PyProjectError extends Error {
  constructor(message: string, line?: number) {
    super(line === undefined ? `pyproject.toml: ${message}` : `pyproject.toml line ${line}: ${message}`);
    this.name = 'PyProjectError';
  }
}

const BARE_KEY = /^[A-Za-z0-9_-]+/;

/**
 * Parses the TOML subset pyproject.toml files use: `[table]` and `[dotted.table]` headers,
 * `key = value` with bare, quoted or dotted keys, basic and literal one-line strings, arrays
 * (over several lines, with comments and a trailing comma), inline tables, booleans and
 * decimal integers. Multi-line strings, floats, dates and arrays of tables are refused with
 * the line they are on, and so is a key given twice.
 */
export function parseToml(text: string): TomlTable {
  const root: TomlTable = {};
  let table = root;
  const defined = new Set<string>();
  let pos = 0;
  let line = 1;
  const fail = (msg: string): never => {
    throw new PyProjectError(msg, line);
  };
  const peek = () => text[pos];
  const skipSpaces = () => {
    while (pos < text.length && (text[pos] === ' ' || text[pos] === '\t')) pos++;
  };
  const skipComment = () => {
    if (peek() === '#') while (pos < text.length && text[pos] !== '\n') pos++;
  };
  /** Spaces, comments and newlines (inside arrays). */
  const skipAll = () => {
    for (;;) {
      skipSpaces();
      skipComment();
      if (peek() === '\r' && text[pos + 1] === '\n') pos++;
      if (peek() === '\n') {
        pos++;
        line++;
        continue;
      }
      return;
    }
  };
  const endOfLine = () => {
    skipSpaces();
    skipComment();
    if (peek() === '\r' && text[pos + 1] === '\n') pos++;
    if (pos >= text.length) return;
    if (peek() !== '\n') fail(`unexpected ${JSON.stringify(text.slice(pos, pos + 12))} after the value`);
    pos++;
    line++;
  };

  const basicString = (): string => {
    if (text.startsWith('"""', pos)) fail('multi-line strings are not supported');
    pos++;
    let out = '';
    for (;;) {
      const c = text[pos];
      if (c === undefined || c === '\n') fail('unterminated string');
      pos++;
      if (c === '"') return out;
      if (c !== '\\') {
        out += c;
        continue;
      }
      const e = text[pos++];
      const simple: Record<string, string> = { b: '\b', t: '\t', n: '\n', f: '\f', r: '\r', '"': '"', '\\': '\\' };
      if (e !== undefined && e in simple) out += simple[e];
      else if (e === 'u' || e === 'U') {
        const n = e === 'u' ? 4 : 8;
        const hex = text.slice(pos, pos + n);
        if (!new RegExp(`^[0-9A-Fa-f]{${n}}$`).test(hex)) fail(`bad \\${e} escape`);
        out += String.fromCodePoint(Number.parseInt(hex, 16));
        pos += n;
      } else fail(`unknown escape \\${e ?? ''}`);
    }
  };
  const literalString = (): string => {
    if (text.startsWith("'''", pos)) fail('multi-line strings are not supported');
    const end = text.indexOf("'", pos + 1);
    const nl = text.indexOf('\n', pos + 1);
    if (end < 0 || (nl >= 0 && nl < end)) fail('unterminated string');
    const s = text.slice(pos + 1, end);
    pos = end + 1;
    return s;
  };
  const key = (): string[] => {
    const parts: string[] = [];
    for (;;) {
      skipSpaces();
      const c = peek();
      if (c === '"') parts.push(basicString());
      else if (c === "'") parts.push(literalString());
      else {
        const m = BARE_KEY.exec(text.slice(pos));
        if (!m) fail(`expected a key at ${JSON.stringify(text.slice(pos, pos + 12))}`);
        parts.push(m![0]);
        pos += m![0].length;
      }
      skipSpaces();
      if (peek() !== '.') return parts;
      pos++;
    }
  };
  const value = (): TomlValue => {
    const c = peek();
    if (c === '"') return basicString();
    if (c === "'") return literalString();
    if (c === '[') {
      pos++;
      const items: TomlValue[] = [];
      for (;;) {
        skipAll();
        if (peek() === ']') {
          pos++;
          return items;
        }
        items.push(value());
        skipAll();
        if (peek() === ',') {
          pos++;
          continue;
        }
        if (peek() === ']') {
          pos++;
          return items;
        }
        fail('expected , or ] in an array');
      }
    }
    if (c === '{') {
      pos++;
      const t: TomlTable = {};
      skipSpaces();
      if (peek() === '}') {
        pos++;
        return t;
      }
      for (;;) {
        const k = key();
        if (peek() !== '=') fail('expected = in an inline table');
        pos++;
        skipSpaces();
        assign(t, k, value(), '');
        skipSpaces();
        if (peek() === '}') {
          pos++;
          return t;
        }
        if (peek() !== ',') fail('expected , or } in an inline table');
        pos++;
      }
    }
    const word = /^[^\s,\]}#]+/.exec(text.slice(pos))?.[0] ?? '';
    pos += word.length;
    if (word === 'true') return true;
    if (word === 'false') return false;
    if (/^[+-]?(0|[1-9](_?\d)*)$/.test(word)) return Number(word.replaceAll('_', ''));
    return fail(`unsupported value ${JSON.stringify(word || text.slice(pos, pos + 12))}`);
  };
  /** `t[part]`, a table (made when missing). */
  function subTable(t: TomlTable, part: string): TomlTable {
    if (!(part in t)) t[part] = {};
    const next = t[part];
    if (typeof next !== 'object' || Array.isArray(next)) fail(`${part} is not a table`);
    return next as TomlTable;
  }
  function assign(t: TomlTable, k: string[], v: TomlValue, prefix: string): void {
    let at = t;
    for (const part of k.slice(0, -1)) at = subTable(at, part);
    const last = k[k.length - 1];
    if (last in at) fail(`key ${prefix}${k.join('.')} defined twice`);
    at[last] = v;
  }

  let prefix = '';
  for (;;) {
    skipAll();
    if (pos >= text.length) return root;
    if (peek() === '[') {
      if (text[pos + 1] === '[') fail('arrays of tables ([[...]]) are not supported');
      pos++;
      const k = key();
      if (peek() !== ']') fail('expected ] after the table name');
      pos++;
      const name = k.join('.');
      if (defined.has(name)) fail(`table [${name}] defined twice`);
      defined.add(name);
      table = root;
      for (const part of k) table = subTable(table, part);
      prefix = `${name}.`;
      endOfLine();
      continue;
    }
    const k = key();
    if (peek() !== '=') fail('expected = after the key');
    pos++;
    skipSpaces();
    assign(table, k, value(), prefix);
    endOfLine();
  }
}

/** A metadata value: one line of printable text (no header of its own can be slipped in). */
function oneLine(v: TomlValue | undefined, field: string, required: true): string;
function oneLine(v: TomlValue | undefined, field: string, required: false): string | null;
function oneLine(v: TomlValue | undefined, field: string, required: boolean): string | null {
  if (v === undefined) {
    if (required) throw new PyProjectError(`[project] ${field} is required`);
    return null;
  }
  if (typeof v !== 'string') throw new PyProjectError(`[project] ${field} must be a string`);
  // biome-ignore lint/suspicious/noControlCharactersInRegex: refusing control characters is the point
  if (v.trim() === '' || /[\u0000-\u001f\u007f]/.test(v))
    throw new PyProjectError(`[project] ${field} must be one line of text`);
  return v;
}

/** The `[project]` fields of pyproject.toml a wheel needs, checked (a dynamic version is refused). */
export function readPyProject(text: string): PyProject {
  const doc = parseToml(text);
  const project = doc.project;
  if (!project || typeof project !== 'object' || Array.isArray(project)) throw new PyProjectError('no [project] table');
  const dynamic = project.dynamic;
  if (dynamic !== undefined)
    throw new PyProjectError(
      `[project] dynamic = ${JSON.stringify(dynamic)} is not supported: the server builds the wheel from static metadata`,
    );
  const name = oneLine(project.name, 'name', true);
  if (!/^([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])$/.test(name))
    throw new PyProjectError(`[project] name ${JSON.stringify(name)} is not a valid distribution name`);
  const version = oneLine(project.version, 'version', true);
  if (!/^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$/.test(version))
    throw new PyProjectError(`[project] version ${JSON.stringify(version)} is not a plain PEP 440 version`);
  const deps = project.dependencies ?? [];
  if (!Array.isArray(deps)) throw new PyProjectError('[project] dependencies must be an array of strings');
  const dependencies = deps.map((d) => oneLine(d, 'dependencies[]', true));
  const readme = project.readme;
  if (readme !== undefined && typeof readme !== 'string')
    throw new PyProjectError('[project] readme must be a file name (a table is not supported)');
  return {
    name,
    version,
    description: oneLine(project.description, 'description', false),
    requiresPython: oneLine(project['requires-python'], 'requires-python', false),
    dependencies,
    readme: readme === undefined ? null : oneLine(readme, 'readme', true),
  };
}

// ---------------------------------------------------------------------------------------
// The zip archive

/** 1980-01-01 00:00:00 in MS-DOS form (the earliest a zip can say): day 1, month 1, year 0. */
const DOS_DATE = (0 << 9) | (1 << 5) | 1;
const DOS_TIME = 0;
/** Regular file, rw-r--r--, in the upper half of the external attributes (made by Unix). */
const FILE_MODE = (0o100644 << 16) >>> 0;

/**
 * A zip archive of `files` in the given order: each deflated (stored when that is not
 * smaller), with CRC-32, a fixed time and mode, no extra fields, a UTF-8 flag on non-ASCII
 * names. No zip64: the archive stays far below 4 GiB and 65535 entries.
 */
export function zipFiles(files: Array<{ name: string; data: Buffer }>): Buffer {
  const parts: Buffer[] = [];
  const central: Buffer[] = [];
  let offset = 0;
  for (const f of files) {
    const name = Buffer.from(f.name, 'utf8');
    const deflated = deflateRawSync(f.data, { level: 9 });
    const stored = deflated.length >= f.data.length;
    const body = stored ? f.data : deflated;
    const method = stored ? 0 : 8;
    const flags = /^[\x20-\x7e]*$/.test(f.name) ? 0 : 0x0800;
    const crc = crc32(f.data);
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4); // version needed: 2.0 (deflate)
    local.writeUInt16LE(flags, 6);
    local.writeUInt16LE(method, 8);
    local.writeUInt16LE(DOS_TIME, 10);
    local.writeUInt16LE(DOS_DATE, 12);
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(body.length, 18);
    local.writeUInt32LE(f.data.length, 22);
    local.writeUInt16LE(name.length, 26);
    local.writeUInt16LE(0, 28);
    const entry = Buffer.alloc(46);
    entry.writeUInt32LE(0x02014b50, 0);
    entry.writeUInt16LE((3 << 8) | 20, 4); // made by Unix, spec 2.0
    entry.writeUInt16LE(20, 6);
    entry.writeUInt16LE(flags, 8);
    entry.writeUInt16LE(method, 10);
    entry.writeUInt16LE(DOS_TIME, 12);
    entry.writeUInt16LE(DOS_DATE, 14);
    entry.writeUInt32LE(crc, 16);
    entry.writeUInt32LE(body.length, 20);
    entry.writeUInt32LE(f.data.length, 24);
    entry.writeUInt16LE(name.length, 28);
    // extra length, comment length, disk number, internal attributes: 0
    entry.writeUInt32LE(FILE_MODE, 38);
    entry.writeUInt32LE(offset, 42);
    parts.push(local, name, body);
    central.push(entry, name);
    offset += local.length + name.length + body.length;
  }
  const dir = Buffer.concat(central);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(files.length, 8);
  end.writeUInt16LE(files.length, 10);
  end.writeUInt32LE(dir.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...parts, dir, end]);
}

// ---------------------------------------------------------------------------------------
// The wheel

/** PEP 427's escaping of a version for a file name: runs of other characters become `_`. */
const escapeComponent = (s: string) => s.replace(/[^\w\d.]+/g, '_');
/** A distribution name in file names: normalized (PEP 503), lower case, `-` `.` `_` runs as `_`. */
const escapeName = (s: string) => s.toLowerCase().replace(/[-_.]+/g, '_');

/** A RECORD field, quoted as Python's csv module would when it has a comma, quote or newline. */
const csvField = (s: string) => (/[",\r\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s);

const recordHash = (data: Buffer) => `sha256=${createHash('sha256').update(data).digest('base64url')}`;

/** The package's files under `dir` (relative, `/`-separated, sorted): sources and the typing marker. */
function packageFiles(root: string, pkg: string): string[] {
  const out: string[] = [];
  const walk = (rel: string) => {
    for (const n of readdirSync(join(root, rel)).sort()) {
      const path = `${rel}/${n}`;
      const st = lstatSync(join(root, path));
      if (st.isDirectory()) {
        if (n !== '__pycache__' && !n.startsWith('.')) walk(path);
      } else if (st.isFile() && (n.endsWith('.py') || n.endsWith('.pyi') || n === 'py.typed')) out.push(path);
    }
  };
  walk(pkg);
  return out.sort();
}

/**
 * Builds the wheel of the Python package in `dir` (default packages/python): pyproject.toml's
 * metadata, and the import package of the same name (`sandboxd/`). When that package has a
 * `_version.py` whose `__version__` differs from pyproject.toml's, the build fails.
 */
export function createPythonWheel(opts: { dir?: string } = {}): PythonWheel {
  const dir = opts.dir ?? PYTHON_PACKAGE_DIR;
  const pyprojectPath = join(dir, 'pyproject.toml');
  if (!existsSync(pyprojectPath)) throw new PyProjectError(`${pyprojectPath} does not exist`);
  const meta = readPyProject(readFileSync(pyprojectPath, 'utf8'));
  const pkg = escapeName(meta.name);
  if (!existsSync(join(dir, pkg, '__init__.py')))
    throw new PyProjectError(`the import package ${pkg}/ (with __init__.py) is missing in ${dir}`);
  const versionFile = join(dir, pkg, '_version.py');
  if (existsSync(versionFile)) {
    const m = /^__version__\s*(?::\s*\w+\s*)?=\s*["']([^"']+)["']/m.exec(readFileSync(versionFile, 'utf8'));
    if (!m) throw new PyProjectError(`${versionFile} has no __version__ = "..." line`);
    if (m[1] !== meta.version)
      throw new PyProjectError(`version ${meta.version} differs from ${pkg}/_version.py's __version__ ${m[1]}`);
  }

  const distInfo = `${escapeName(meta.name)}-${escapeComponent(meta.version)}.dist-info`;
  const files: Array<{ name: string; data: Buffer }> = packageFiles(dir, pkg).map((name) => ({
    name,
    data: readFileSync(join(dir, name)),
  }));

  const headers = ['Metadata-Version: 2.1', `Name: ${meta.name}`, `Version: ${meta.version}`];
  if (meta.description) headers.push(`Summary: ${meta.description}`);
  if (meta.requiresPython) headers.push(`Requires-Python: ${meta.requiresPython}`);
  for (const d of meta.dependencies) headers.push(`Requires-Dist: ${d}`);
  let body = '';
  if (meta.readme) {
    const readmePath = resolve(dir, meta.readme);
    if (!readmePath.startsWith(`${resolve(dir)}/`)) throw new PyProjectError('[project] readme is outside the package');
    const type = /\.md$/i.test(meta.readme)
      ? 'text/markdown'
      : /\.rst$/i.test(meta.readme)
        ? 'text/x-rst'
        : 'text/plain';
    headers.push(`Description-Content-Type: ${type}`);
    body = `\n${readFileSync(readmePath, 'utf8')}`;
  }
  files.push(
    { name: `${distInfo}/METADATA`, data: Buffer.from(`${headers.join('\n')}\n${body}`) },
    {
      name: `${distInfo}/WHEEL`,
      data: Buffer.from(
        'Wheel-Version: 1.0\nGenerator: sandboxd-server (python-wheel.ts)\nRoot-Is-Purelib: true\nTag: py3-none-any\n',
      ),
    },
    { name: `${distInfo}/top_level.txt`, data: Buffer.from(`${pkg}\n`) },
  );
  const record = [
    ...files.map((f) => `${csvField(f.name)},${recordHash(f.data)},${f.data.length}`),
    `${csvField(`${distInfo}/RECORD`)},,`,
  ];
  files.push({ name: `${distInfo}/RECORD`, data: Buffer.from(`${record.join('\n')}\n`) });

  const wheel = zipFiles(files);
  const digest = createHash('sha256').update(wheel);
  const sha256 = digest.copy().digest('hex');
  return {
    name: meta.name,
    version: meta.version,
    fileName: `${escapeName(meta.name)}-${escapeComponent(meta.version)}-py3-none-any.whl`,
    wheel,
    etag: `"${digest.digest('base64url').slice(0, 27)}"`,
    sha256,
    entries: files.map((f) => f.name),
  };
}

let loading: Promise<PythonWheel> | null = null;

/** {@link createPythonWheel} of the repo's Python SDK, once per process (every server in a test process shares it). */
export function loadPythonWheel(): Promise<PythonWheel> {
  loading ??= Promise.resolve()
    .then(() => createPythonWheel())
    .catch((e) => {
      loading = null;
      throw e;
    });
  return loading;
}
