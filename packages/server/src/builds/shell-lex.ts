/**
 * The word processing of a Dockerfile: quote removal, the escape character and `$VAR` /
 * `${VAR...}` substitution, as BuildKit's `shell.Lex` does them (frontend/dockerfile/shell/lex.go)
 * for the instructions Docker substitutes in (FROM, ENV, ARG, LABEL, COPY, ADD, WORKDIR, USER,
 * EXPOSE; never RUN, CMD or ENTRYPOINT, whose shell does it).
 *
 * - `'...'` keeps everything literally; `"..."` keeps everything but `$` substitution, and the
 *   escape character escapes only `"`, `$` and itself there; outside quotes the escape
 *   character makes the next character literal (`\$X` is `$X`).
 * - `$NAME`, `${NAME}`; `${NAME:-word}` / `${NAME-word}` (default when unset or empty / unset),
 *   `${NAME:+word}` / `${NAME+word}` (alternative), `${NAME:?msg}` / `${NAME?msg}` (error),
 *   `${NAME#pat}` `${NAME##pat}` `${NAME%pat}` `${NAME%%pat}` (trim, `*` and `?` globs),
 *   `${NAME/pat/repl}` `${NAME//pat/repl}` (replace). An unset variable is empty.
 *
 * Errors are {@link ShellLexError}s whose message says what is wrong (the caller adds the line).
 */

/** What a word's variables resolve to: a value, or `undefined` when the variable is unset. */
export type EnvLookup = (name: string) => string | undefined;

export interface LexOptions {
  /** Keep quote characters in the result (heredoc detection). */
  rawQuotes?: boolean;
  /** Keep escape characters in the result (heredoc detection). */
  rawEscapes?: boolean;
  /** Leave `$NAME` of unset variables as written (heredoc detection). */
  skipUnsetEnv?: boolean;
}

export class ShellLexError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ShellLexError';
  }
}

const EOF = '';
/** Longest word once substituted: `$A$A...` would otherwise grow a word (and a Dockerfile's ENV) without end. */
export const MAX_WORD_CHARS = 2 ** 20;

/** `word` with its quotes removed and its variables substituted. */
export function processWord(word: string, env: EnvLookup, escapeToken = '\\', o: LexOptions = {}): string {
  return new Lexer(word, env, escapeToken, o).run().result;
}

/**
 * `word` substituted, then split into words at unquoted whitespace (whitespace a variable's
 * value brings splits too, as in a shell).
 */
export function processWords(word: string, env: EnvLookup, escapeToken = '\\', o: LexOptions = {}): string[] {
  return new Lexer(word, env, escapeToken, o).run().words;
}

const isSpace = (ch: string): boolean => /^\s$/u.test(ch);
const isLetter = (ch: string): boolean => /^\p{L}$/u.test(ch);
const isDigit = (ch: string): boolean => /^\p{Nd}$/u.test(ch);
/** POSIX special parameters (`$@`, `$*`, `$#`, ...): names of one character. */
const SPECIAL_PARAMS = new Set(['@', '*', '#', '?', '-', '$', '!', '0']);

class Words {
  buf = '';
  words: string[] = [];
  inWord = false;
  addChar(ch: string): void {
    if (isSpace(ch)) {
      if (this.inWord && this.buf !== '') {
        this.words.push(this.buf);
        this.buf = '';
        this.inWord = false;
      }
    } else {
      this.addRawChar(ch);
    }
  }
  addRawChar(ch: string): void {
    this.buf += ch;
    this.inWord = true;
  }
  addString(s: string): void {
    for (const ch of s) this.addChar(ch);
  }
  addRawString(s: string): void {
    this.buf += s;
    this.inWord = true;
  }
  get(): string[] {
    if (this.buf !== '') {
      this.words.push(this.buf);
      this.buf = '';
      this.inWord = false;
    }
    return this.words;
  }
}

class Lexer {
  private readonly chars: string[];
  private pos = 0;
  private rawEscapes: boolean;

  constructor(
    word: string,
    private readonly env: EnvLookup,
    private readonly esc: string,
    private readonly o: LexOptions,
  ) {
    this.chars = Array.from(word);
    this.rawEscapes = o.rawEscapes ?? false;
  }

  run(): { result: string; words: string[] } {
    return this.processStopOn(EOF, this.rawEscapes);
  }

  private peek(): string {
    return this.pos < this.chars.length ? this.chars[this.pos] : EOF;
  }

  private next(): string {
    return this.pos < this.chars.length ? this.chars[this.pos++] : EOF;
  }

  private processStopOn(stop: string, rawEscapes: boolean): { result: string; words: string[] } {
    const saved = this.rawEscapes;
    this.rawEscapes = rawEscapes;
    try {
      let result = '';
      const words = new Words();
      while (this.peek() !== EOF) {
        const ch = this.peek();
        if (stop !== EOF && ch === stop) {
          this.next();
          return { result, words: words.get() };
        }
        const special =
          ch === '$'
            ? () => this.processDollar()
            : ch === '<'
              ? () => this.processPossibleHeredoc()
              : ch === "'"
                ? () => this.processSingleQuote()
                : ch === '"'
                  ? () => this.processDoubleQuote()
                  : null;
        if (special) {
          const tmp = special();
          result += tmp;
          if (result.length > MAX_WORD_CHARS)
            throw new ShellLexError(`the word is over ${MAX_WORD_CHARS} characters once substituted`);
          if (ch === '$') words.addString(tmp);
          else words.addRawString(tmp);
          continue;
        }
        let c = this.next();
        if (c === this.esc) {
          if (this.rawEscapes) {
            words.addRawChar(c);
            result += c;
          }
          c = this.next();
          if (c === EOF) break;
          words.addRawChar(c);
        } else {
          words.addChar(c);
        }
        result += c;
      }
      if (stop !== EOF) throw new ShellLexError(`unexpected end of statement while looking for matching ${stop}`);
      return { result, words: words.get() };
    } finally {
      this.rawEscapes = saved;
    }
  }

  private processSingleQuote(): string {
    let result = '';
    const open = this.next();
    if (this.o.rawQuotes) result += open;
    for (;;) {
      const ch = this.next();
      if (ch === EOF) throw new ShellLexError('unexpected end of statement while looking for matching single-quote');
      if (ch === "'") {
        if (this.o.rawQuotes) result += ch;
        return result;
      }
      result += ch;
    }
  }

  private processDoubleQuote(): string {
    let result = '';
    const open = this.next();
    if (this.o.rawQuotes) result += open;
    for (;;) {
      const p = this.peek();
      if (p === EOF) throw new ShellLexError('unexpected end of statement while looking for matching double-quote');
      if (p === '"') {
        const ch = this.next();
        if (this.o.rawQuotes) result += ch;
        return result;
      }
      if (p === '$') {
        result += this.processDollar();
        continue;
      }
      let ch = this.next();
      if (ch === this.esc) {
        if (this.rawEscapes) result += ch;
        const n = this.peek();
        if (n === EOF) continue;
        if (n === '"' || n === '$' || n === this.esc) ch = this.next();
      }
      result += ch;
    }
  }

  private processPossibleHeredoc(): string {
    this.next();
    if (this.peek() !== '<') return '<';
    this.next();
    let space = '';
    while (this.peek() === ' ' || this.peek() === '\t' || this.peek() === '\r') space += this.next();
    return `<<${space}`;
  }

  private processName(): string {
    let name = '';
    while (this.peek() !== EOF) {
      const ch = this.peek();
      if (name === '' && isDigit(ch)) {
        while (this.peek() !== EOF && isDigit(this.peek())) name += this.next();
        return name;
      }
      if (name === '' && SPECIAL_PARAMS.has(ch)) return this.next();
      if (!isLetter(ch) && !isDigit(ch) && ch !== '_') break;
      name += this.next();
    }
    return name;
  }

  private processDollar(): string {
    this.next();
    if (this.peek() !== '{') {
      const name = this.processName();
      if (name === '') return '$';
      const value = this.env(name);
      if (value === undefined && this.o.skipUnsetEnv) return `$${name}`;
      return value ?? '';
    }
    this.next();
    const first = this.peek();
    if (first === EOF) throw new ShellLexError("syntax error: missing '}'");
    if (first === '{' || first === '}' || first === ':') throw new ShellLexError('syntax error: bad substitution');
    const name = this.processName();
    let ch = this.next();
    let chs = ch;
    switch (ch) {
      case '}': {
        const value = this.env(name);
        if (value === undefined && this.o.skipUnsetEnv) return `\${${name}}`;
        return value ?? '';
      }
      case ':':
      case '+':
      case '-':
      case '?':
      case '#':
      case '%': {
        const nullIsUnset = ch === ':';
        if (nullIsUnset) {
          ch = this.next();
          chs += ch;
        }
        const trims = ch === '#' || ch === '%';
        if (nullIsUnset && (trims || !['+', '-', '?'].includes(ch))) {
          throw new ShellLexError(`unsupported modifier (${chs}) in substitution`);
        }
        let word: string;
        try {
          word = this.processStopOn('}', trims).result;
        } catch (e) {
          if (this.peek() === EOF) throw new ShellLexError("syntax error: missing '}'");
          throw e;
        }
        const value = this.env(name);
        const set = value !== undefined;
        if (!set && this.o.skipUnsetEnv) return `\${${name}${chs}${word}}`;
        const unsetOrNull = !set || (nullIsUnset && value === '');
        switch (ch) {
          case '-':
            return unsetOrNull ? word : value!;
          case '+':
            return unsetOrNull ? '' : word;
          case '?':
            if (!set) throw new ShellLexError(`${name}: ${word || 'is not allowed to be unset'}`);
            if (nullIsUnset && value === '')
              throw new ShellLexError(`${name}: ${word || 'is not allowed to be empty'}`);
            return value!;
          default: {
            const greedy = word.startsWith(ch);
            const pattern = greedy ? word.slice(1) : word;
            return ch === '%' ? trimSuffix(pattern, value ?? '', greedy) : trimPrefix(pattern, value ?? '', greedy);
          }
        }
      }
      case '/': {
        const all = this.peek() === '/';
        if (all) this.next();
        let pattern: string;
        let replacement: string;
        try {
          pattern = this.processStopOn('/', true).result;
        } catch (e) {
          if (this.peek() === EOF) throw new ShellLexError(`syntax error: missing '/' in \${NAME/pattern/replacement}`);
          throw e;
        }
        try {
          replacement = this.processStopOn('}', true).result;
        } catch (e) {
          if (this.peek() === EOF) throw new ShellLexError("syntax error: missing '}'");
          throw e;
        }
        const value = this.env(name);
        if (value === undefined && this.o.skipUnsetEnv) return `\${${name}/${pattern}/${replacement}}`;
        const re = shellPatternToRegex(pattern, true, false, all ? 'gu' : 'u');
        // A function replacement: `$&` and friends in `replacement` stay literal.
        return (value ?? '').replace(re, () => replacement);
      }
      default:
        throw new ShellLexError(`unsupported modifier (${chs === EOF ? 'end of word' : chs}) in substitution`);
    }
  }
}

/** A `${VAR#pattern}` glob (`*`, `?`, `\` escaping `*`, `?`, `\`) as a regular expression. */
function shellPatternToRegex(pattern: string, greedy: boolean, anchored: boolean, flags = 'u'): RegExp {
  const chars = Array.from(pattern);
  let out = anchored ? '^' : '';
  for (let i = 0; i < chars.length; i++) {
    const ch = chars[i];
    if (ch === '*') {
      out += greedy ? '[^]*' : '[^]*?';
    } else if (ch === '?') {
      out += '[^]';
    } else if (ch === '\\') {
      const n = chars[i + 1];
      // `}` and `/` are escaped inside `${}`, but the escape is not part of the pattern.
      if (n === '}' || n === '/') continue;
      if (n !== '*' && n !== '?' && n !== '\\') {
        throw new ShellLexError(`invalid pattern (${pattern}) in substitution: invalid esc '\\${n ?? ''}'`);
      }
      out += `\\${n}`;
      i++;
    } else {
      out += ch.replace(/[.*+?^${}()|[\]\\/]/gu, '\\$&');
    }
  }
  return new RegExp(out, flags);
}

function trimPrefix(pattern: string, value: string, greedy: boolean): string {
  const m = shellPatternToRegex(pattern, greedy, true).exec(value);
  return m ? value.slice(m[0].length) : value;
}

/** Reverses a pattern keeping each escape before the character it escapes (`a\*c` -> `c\*a`). */
function reversePattern(pattern: string): string {
  const chars = Array.from(pattern);
  const out: string[] = new Array(chars.length);
  const last = chars.length - 1;
  for (let i = 0; i <= last; ) {
    const outIdx = last - i;
    if (chars[i] === '\\' && i !== last) {
      out[outIdx - 1] = chars[i];
      out[outIdx] = chars[i + 1];
      i += 2;
    } else {
      out[outIdx] = chars[i];
      i++;
    }
  }
  return out.join('');
}

const reverse = (s: string): string => Array.from(s).reverse().join('');

function trimSuffix(pattern: string, value: string, greedy: boolean): string {
  // The shortest match from the right is the shortest from the left of both reversed.
  return reverse(trimPrefix(reversePattern(pattern), reverse(value), greedy));
}
