import { SandboxdError } from '@sandboxd/protocol';
import { processWords } from './shell-lex.js';

/**
 * The first pass over a Dockerfile, as BuildKit's parser (frontend/dockerfile/parser) does it:
 * parser directives at the top (`# escape=`, `# syntax=` and `# check=` recognised and only
 * `escape` used), comment lines dropped (also inside continuations), lines joined at the escape
 * character, empty continuation lines skipped, then each instruction split into its keyword,
 * its leading `--flags` and the rest. Nothing is interpreted here beyond that.
 */

/** One instruction as written, continuation lines joined. */
export interface RawInstruction {
  /** 1-based line where it starts. */
  line: number;
  /** The keyword as written (`run`, `COPY`). */
  keyword: string;
  /** The keyword lowercased. */
  cmd: string;
  /** Its `--name[=value]` flags, quotes and escapes processed. */
  flags: string[];
  /** What follows the keyword and flags, trimmed. */
  rest: string;
  /** The whole instruction on one line (for logs and errors). */
  text: string;
}

export interface SplitDockerfile {
  /** The escape character: `\` or, with `# escape=\``, a backtick. */
  esc: string;
  instructions: RawInstruction[];
}

/** Instructions at most in one Dockerfile. */
export const MAX_INSTRUCTIONS = 1000;
/** Longest `text` kept in an error's details. */
const MAX_ERROR_TEXT = 1024;

/** The one error shape of the Dockerfile front end: `Dockerfile line N: <what>`, details `{line, instruction}`. */
export function dockerfileError(line: number, instruction: string, what: string): SandboxdError {
  const text = instruction.length > MAX_ERROR_TEXT ? `${instruction.slice(0, MAX_ERROR_TEXT)}...` : instruction;
  return new SandboxdError('validation', `Dockerfile line ${line}: ${what}`, { line, instruction: text });
}

const DIRECTIVE_RE = /^([a-zA-Z][a-zA-Z0-9]*)\s*=\s*(.+?)\s*$/u;
const KNOWN_DIRECTIVES = new Set(['syntax', 'escape', 'check']);
const WHITESPACE_RE = /[\t\v\f\r ]+/u;
/** `<<EOF`, `<<-EOF`, `2<<EOF`, `<< "EOF"`: a heredoc word (BuildKit's reHeredoc). */
const HEREDOC_RE = /^(\d*)<<(-?)\s*([^<]*)$/u;
const HEREDOC_INSTRUCTIONS = new Set(['run', 'copy', 'add']);

const trimLeft = (s: string): string => s.replace(/^\s+/u, '');
const isComment = (s: string): boolean => trimLeft(s).startsWith('#');

/** Splits `text` into instructions; throws the {@link dockerfileError} of the first problem. */
export function splitDockerfile(text: string): SplitDockerfile {
  const lines = text.split('\n').map((l) => l.replace(/[\r\n]+$/u, ''));
  if (text.endsWith('\n')) lines.pop();
  if (lines.length > 0 && lines[0].startsWith('\uFEFF')) lines[0] = lines[0].slice(1);

  let esc = '\\';
  let continuation = continuationRe(esc);
  const seen = new Set<string>();
  let directivesDone = false;
  /** Parser directives: only while every line so far was one. */
  const directive = (line: string, n: number): void => {
    if (directivesDone) return;
    if (!line.startsWith('#')) {
      directivesDone = true;
      return;
    }
    const m = DIRECTIVE_RE.exec(trimLeft(line.slice(1)));
    const key = m?.[1].toLowerCase();
    if (!m || !key || !KNOWN_DIRECTIVES.has(key)) {
      directivesDone = true;
      return;
    }
    if (seen.has(key)) throw dockerfileError(n, line, `only one ${key} parser directive can be used`);
    seen.add(key);
    if (key === 'escape') {
      if (m[2] !== '\\' && m[2] !== '`') throw dockerfileError(n, line, `invalid escape token '${m[2]}': use \` or \\`);
      esc = m[2];
      continuation = continuationRe(esc);
    }
  };
  /** The line without a continuation escape at its end, and whether the instruction ends there. */
  const trimContinuation = (line: string): [string, boolean] =>
    continuation.test(line) ? [line.replace(continuation, '$1'), false] : [line, true];

  const out: RawInstruction[] = [];
  let i = 0;
  while (i < lines.length) {
    const startLine = i + 1;
    let first = trimLeft(lines[i]);
    directive(first, startLine);
    i++;
    if (isComment(first)) first = '';
    let [joined, ended] = trimContinuation(first);
    if (ended && joined === '') continue;
    while (!ended && i < lines.length) {
      const raw = lines[i];
      directive(raw, i + 1);
      i++;
      if (isComment(raw)) continue;
      if (trimLeft(raw) === '') continue;
      const [part, end] = trimContinuation(raw);
      joined += part;
      ended = end;
    }
    out.push(splitInstruction(joined, startLine, esc));
    if (out.length > MAX_INSTRUCTIONS) {
      throw dockerfileError(startLine, joined.trim(), `more than ${MAX_INSTRUCTIONS} instructions`);
    }
  }
  return { esc, instructions: out };
}

function continuationRe(esc: string): RegExp {
  const e = esc === '\\' ? '\\\\' : esc;
  return new RegExp(`([^${e}])${e}[ \\t]*$|^${e}[ \\t]*$`, 'u');
}

function splitInstruction(line: string, n: number, esc: string): RawInstruction {
  const text = line.trim();
  const m = WHITESPACE_RE.exec(text);
  const keyword = m ? text.slice(0, m.index) : text;
  const args = m ? text.slice(m.index + m[0].length) : '';
  const [rest, flags] = extractFlags(args, esc);
  return { line: n, keyword, cmd: keyword.toLowerCase(), flags, rest: rest.trim(), text };
}

/** BuildKit's extractBuilderFlags: leading `--words` (quotes and escapes processed) up to the first other word or `--`. */
function extractFlags(line: string, esc: string): [string, string[]] {
  const words: string[] = [];
  let phase: 'spaces' | 'word' | 'quote' = 'spaces';
  let word = '';
  let quote = '';
  let blankOk = false;
  const isSpace = (c: string) => /^\s$/u.test(c);
  for (let pos = 0; pos <= line.length; pos++) {
    const ch = pos < line.length ? line[pos] : '';
    if (phase === 'spaces') {
      if (pos === line.length) break;
      if (isSpace(ch)) continue;
      if (ch !== '-' || pos + 1 === line.length || line[pos + 1] !== '-') return [line.slice(pos), words];
      phase = 'word';
    }
    if (pos === line.length) {
      if (word !== '--' && (blankOk || word.length > 0)) words.push(word);
      break;
    }
    if (phase === 'word') {
      if (isSpace(ch)) {
        phase = 'spaces';
        if (word === '--') return [line.slice(pos), words];
        if (blankOk || word.length > 0) words.push(word);
        word = '';
        blankOk = false;
        continue;
      }
      if (ch === "'" || ch === '"') {
        quote = ch;
        blankOk = true;
        phase = 'quote';
        continue;
      }
      if (ch === esc) {
        if (pos + 1 === line.length) continue;
        pos++;
        word += line[pos];
        continue;
      }
      word += ch;
      continue;
    }
    // phase === 'quote'
    if (ch === quote) {
      phase = 'word';
      continue;
    }
    if (ch === esc) {
      if (pos + 1 === line.length) {
        phase = 'word';
        continue;
      }
      pos++;
      word += line[pos];
      continue;
    }
    word += ch;
  }
  return ['', words];
}

/**
 * Whether a shell-form RUN, COPY or ADD holds a heredoc (`<<EOF`), which BuildKit would read
 * from the lines that follow: found the way BuildKit finds them (its words, quotes kept).
 */
export function hasHeredoc(ins: RawInstruction, jsonForm: boolean): boolean {
  if (!HEREDOC_INSTRUCTIONS.has(ins.cmd) || jsonForm || !ins.text.includes('<<')) return false;
  let words: string[];
  try {
    words = processWords(ins.text, () => undefined, '\\', { rawQuotes: true, rawEscapes: true, skipUnsetEnv: true });
  } catch {
    return false;
  }
  return words.some((w) => {
    const m = HEREDOC_RE.exec(w);
    if (!m || m[3] === '') return false;
    try {
      return processWords(m[3], () => undefined, '\\', { skipUnsetEnv: true }).length === 1;
    } catch {
      return false;
    }
  });
}
