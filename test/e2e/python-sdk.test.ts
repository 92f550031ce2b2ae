/**
 * The Python SDK (packages/python) against the real server on the real runtime: starts one
 * server and an account, runs its pytest suite with Debian's /usr/bin/python3 (httpx,
 * websockets, pytest, pytest-asyncio from python3-* packages), and reports every pytest case
 * as a node test, so a failing Python test fails `npm test` and the summary counts them.
 * Then `mypy --strict` over the package. Every sandbox the tests made is deleted by the
 * harness's stop (it cleans the account's sandboxes, snapshots and volumes too).
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { ADMIN_KEY, IMAGE, newAccount, RUNTIME, startServer, type Server } from './harness.js';
import { TEST_IMAGE_DIR } from './local-runtime.js';

const ROOT = resolve(fileURLToPath(import.meta.url), '../../..');
const PY = '/usr/bin/python3';
/** Bound of the whole pytest run (it aims at under 3 minutes on 2 cores). */
const PYTEST_TIMEOUT_MS = 900_000;

/** Why the suite cannot run here, or false. */
function skipReason(): string | false {
  if (RUNTIME !== 'local') return 'needs SANDBOXD_E2E_RUNTIME=local';
  if (process.getuid?.() !== 0) return 'the local runtime needs root';
  try {
    execFileSync(PY, ['-c', 'import httpx, websockets, pytest, pytest_asyncio, mypy'], { stdio: 'pipe' });
  } catch {
    return `${PY} lacks httpx, websockets, pytest, pytest-asyncio or mypy: install python3-httpx python3-websockets python3-pytest python3-pytest-asyncio mypy (npm run setup does)`;
  }
  return false;
}
const SKIP = skipReason();

/** Runs a program to its end (bounded); never rejects: the exit code, stdout and stderr. */
function run(
  file: string,
  args: string[],
  o: { env?: Record<string, string>; timeoutMs: number },
): Promise<{ code: number | null; stdout: string; stderr: string; error?: Error }> {
  return new Promise((res) => {
    execFile(
      file,
      args,
      {
        cwd: ROOT,
        env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1', ...o.env },
        timeout: o.timeoutMs,
        killSignal: 'SIGKILL',
        maxBuffer: 64 << 20,
      },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : null) : 0;
        res({ code, stdout, stderr, error: err ?? undefined });
      },
    );
  });
}

/** One `<testcase>` of pytest's JUnit XML. */
interface Case {
  name: string;
  outcome: 'passed' | 'failed' | 'skipped';
  message: string;
}

function unescapeXml(s: string): string {
  return s
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"')
    .replace(/&apos;/g, "'")
    .replace(/&#(\d+);/g, (_, d) => String.fromCodePoint(Number(d)))
    .replace(/&#x([0-9a-f]+);/gi, (_, h) => String.fromCodePoint(Number.parseInt(h, 16)))
    .replace(/&amp;/g, '&');
}

function attr(tag: string, name: string): string {
  const m = new RegExp(`\\s${name}="([^"]*)"`).exec(tag);
  return m ? unescapeXml(m[1]) : '';
}

/** The test cases of a JUnit XML report, in order: name `module::test`, outcome and message. */
export function parseJunit(xml: string): Case[] {
  const out: Case[] = [];
  const re = /<testcase\b([^>]*?)(\/>|>([\s\S]*?)<\/testcase>)/g;
  for (let m = re.exec(xml); m; m = re.exec(xml)) {
    const head = m[1];
    const body = m[3] ?? '';
    const cls = attr(head, 'classname').replace(/^tests\./, '');
    const name = `${cls}::${attr(head, 'name')}`;
    const bad = /<(failure|error)\b([^>]*?)(\/>|>([\s\S]*?)<\/\1>)/.exec(body);
    const skipped = /<skipped\b([^>]*?)(\/>|>([\s\S]*?)<\/skipped>)/.exec(body);
    if (bad) {
      const text = unescapeXml(bad[4] ?? '');
      out.push({ name, outcome: 'failed', message: `${attr(bad[2], 'message')}\n${text}`.trim() });
    } else if (skipped) {
      out.push({ name, outcome: 'skipped', message: attr(skipped[1], 'message') || 'skipped' });
    } else {
      out.push({ name, outcome: 'passed', message: '' });
    }
  }
  return out;
}

describe('Python SDK (pytest on the real server)', { skip: SKIP, timeout: PYTEST_TIMEOUT_MS + 180_000 }, () => {
  let s: Server;
  let key: string;
  /** An account with no tokens (402) and one on the FREE plan (concurrency 5: the 403). */
  let brokeKey: string;
  let limitedKey: string;
  let tmp: string;

  before(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'sandboxd-pytest-'));
    // A busy host may take a while to start a code interpreter's kernel: the create waits for it.
    s = await startServer({ env: { SANDBOXD_SERVICE_START_TIMEOUT_MS: '240000' } });
    key = (await newAccount(s, { tokens: 1_000_000, plan: 'PRO' })).key;
    brokeKey = (await newAccount(s, { tokens: 0 })).key;
    limitedKey = (await newAccount(s, { tokens: 100_000, plan: 'FREE' })).key;
  });
  after(async () => {
    await s?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it('runs the pytest suite: each case below', { timeout: PYTEST_TIMEOUT_MS + 60_000 }, async (t) => {
    const xmlPath = join(tmp, 'pytest.xml');
    const r = await run(
      PY,
      [
        '-m',
        'pytest',
        '-p',
        'no:cacheprovider',
        '-q',
        '-c',
        'packages/python/pyproject.toml',
        '--rootdir',
        'packages/python',
        `--junitxml=${xmlPath}`,
        // pytest's temporary dirs under ours (removed after), not /tmp/pytest-of-<user>.
        `--basetemp=${join(tmp, 'pytest')}`,
        'packages/python/tests',
      ],
      {
        timeoutMs: PYTEST_TIMEOUT_MS,
        env: {
          SANDBOXD_URL: s.baseUrl,
          SANDBOXD_API_KEY: key,
          SANDBOXD_IMAGE: IMAGE,
          SANDBOXD_ADMIN_KEY: ADMIN_KEY,
          SANDBOXD_BROKE_API_KEY: brokeKey,
          SANDBOXD_LIMITED_API_KEY: limitedKey,
          SANDBOXD_TEST_IMAGE_DIR: TEST_IMAGE_DIR,
          PYTHONPATH: join(ROOT, 'packages/python'),
          SANDBOX_API_KEY: '',
          SANDBOX_API_URL: '',
        },
      },
    );
    let xml = '';
    try {
      xml = readFileSync(xmlPath, 'utf8');
    } catch {
      /* no report: pytest did not get that far */
    }
    const cases = parseJunit(xml);
    for (const c of cases) {
      await t.test(c.name, c.outcome === 'skipped' ? { skip: c.message } : {}, () => {
        if (c.outcome === 'failed') assert.fail(c.message);
      });
    }
    // pytest exits 0 (all passed) or 1 (some failed, reported above); anything else (a usage
    // or collection error, a timeout) fails here with its output.
    const tail = `${r.stdout.slice(-4000)}\n${r.stderr.slice(-4000)}`;
    assert.ok(cases.length > 0, `pytest reported no test cases (exit ${r.code}):\n${tail}`);
    assert.ok(r.code === 0 || r.code === 1, `pytest exited ${r.code} ${r.error?.message ?? ''}:\n${tail}`);
  });

  it('passes mypy --strict', { timeout: 300_000 }, async () => {
    const r = await run(PY, ['-m', 'mypy', '--strict', '--cache-dir=/dev/null', 'packages/python/sandboxd'], {
      timeoutMs: 240_000,
    });
    assert.equal(r.code, 0, `mypy --strict failed:\n${r.stdout}\n${r.stderr}`);
  });
});
