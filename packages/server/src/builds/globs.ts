import { posix } from 'node:path';

/**
 * The two pattern languages of a Docker build context:
 * - COPY/ADD sources: Go's `filepath.Match`, one path segment at a time (`*`, `?`, `[a-z]`,
 *   `[^a-z]`, `\` escaping), as BuildKit resolves wildcards;
 * - `.dockerignore`: Docker's patternmatcher (`**` for any number of directories, a leading
 *   `/` or `./` ignored, `!` exceptions, the last matching pattern wins, and a path is
 *   excluded when a pattern matches it or one of its parent directories).
 */

/** A malformed pattern; the message says which. */
export class PatternError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PatternError';
  }
}

/** BuildKit's containsWildcards: `*`, `?` or `[` not escaped by `\`. */
export function hasWildcards(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (c === '\\') i++;
    else if (c === '*' || c === '?' || c === '[') return true;
  }
  return false;
}

/** A literal character outside a RegExp class. */
const reEscape = (c: string): string => c.replace(/[\\^$.*+?()[\]{}|/]/gu, '\\$&');
/** A literal character inside a RegExp class. */
const classEscape = (c: string): string => c.replace(/[\\^[\]-]/gu, '\\$&');

/**
 * A `filepath.Match` pattern for one path segment (no `/`) as a RegExp; throws
 * {@link PatternError} for a malformed one (an unclosed or empty `[...]`, a trailing `\`).
 */
export function segmentMatcher(pattern: string): RegExp {
  const chars = Array.from(pattern);
  let out = '^';
  let i = 0;
  const esc = (): string => {
    // One (possibly escaped) character of a class.
    let c = chars[i];
    if (c === undefined || c === '-' || c === ']') throw new PatternError(`syntax error in pattern "${pattern}"`);
    if (c === '\\') {
      i++;
      c = chars[i];
      if (c === undefined) throw new PatternError(`syntax error in pattern "${pattern}"`);
    }
    i++;
    return c;
  };
  while (i < chars.length) {
    const c = chars[i];
    if (c === '*') {
      out += '[^/]*';
      i++;
    } else if (c === '?') {
      out += '[^/]';
      i++;
    } else if (c === '\\') {
      const n = chars[i + 1];
      if (n === undefined) throw new PatternError(`syntax error in pattern "${pattern}" (a trailing \\)`);
      out += reEscape(n);
      i += 2;
    } else if (c === '[') {
      i++;
      const negated = chars[i] === '^';
      if (negated) i++;
      const ranges: string[] = [];
      let n = 0;
      for (;;) {
        if (chars[i] === ']' && n > 0) {
          i++;
          break;
        }
        const lo = esc();
        let hi = lo;
        if (chars[i] === '-') {
          i++;
          hi = esc();
        }
        n++;
        if ((lo.codePointAt(0) ?? 0) <= (hi.codePointAt(0) ?? 0)) {
          ranges.push(lo === hi ? classEscape(lo) : `${classEscape(lo)}-${classEscape(hi)}`);
        }
      }
      if (negated) out += `[^/${ranges.join('')}]`;
      else out += ranges.length > 0 ? `[${ranges.join('')}]` : '(?!)';
    } else {
      out += reEscape(c);
      i++;
    }
  }
  return new RegExp(`${out}$`, 'u');
}

/** Go's `filepath.Clean` for slash paths. */
export function goClean(p: string): string {
  if (p === '') return '.';
  const n = posix.normalize(p);
  return n.length > 1 && n.endsWith('/') ? n.slice(0, -1) : n;
}

interface IgnorePattern {
  source: string;
  exclusion: boolean;
  /** Tests a slash path relative to the context root. */
  test: (path: string) => boolean;
}

/** `.dockerignore` patterns, compiled: {@link excludes} says whether a path is left out. */
export class DockerIgnore {
  private constructor(private readonly patterns: IgnorePattern[]) {}

  /** No patterns: nothing is excluded. */
  static none(): DockerIgnore {
    return new DockerIgnore([]);
  }

  /**
   * Parses a `.dockerignore` file: `#` comment lines, blank lines skipped, each pattern
   * trimmed, cleaned, a leading `/` dropped, `!` marks an exception. Throws
   * {@link PatternError} naming the line of a malformed pattern.
   */
  static parse(text: string): DockerIgnore {
    const lines = text.replace(/^\uFEFF/u, '').split(/\r?\n/u);
    const patterns: IgnorePattern[] = [];
    lines.forEach((raw, idx) => {
      if (raw.startsWith('#')) return;
      let p = raw.trim();
      if (p === '') return;
      const exclusion = p.startsWith('!');
      if (exclusion) p = p.slice(1).trim();
      if (p === '') throw new PatternError(`.dockerignore line ${idx + 1}: "!" alone is not a pattern`);
      p = goClean(p);
      if (p.length > 1 && p.startsWith('/')) p = p.slice(1);
      try {
        patterns.push({ source: p, exclusion, test: compileIgnore(p) });
      } catch {
        throw new PatternError(`.dockerignore line ${idx + 1}: syntax error in pattern "${raw.trim()}"`);
      }
    });
    return new DockerIgnore(patterns);
  }

  get empty(): boolean {
    return this.patterns.length === 0;
  }

  /** Whether `path` (relative, slash-separated, no `.`/`..`) is excluded: patternmatcher's MatchesOrParentMatches. */
  excludes(path: string): boolean {
    if (path === '' || path === '.') return false;
    let info = this.matchInfo('', null);
    const parts = path.split('/');
    for (let i = 0; i < parts.length; i++) info = this.matchInfo(parts.slice(0, i + 1).join('/'), info);
    return this.excluded(info);
  }

  /**
   * For a walk from the root down: which patterns match `path` or one of its parents, given
   * the same for its parent (`null` for the root). One test per pattern per path.
   */
  matchInfo(path: string, parent: boolean[] | null): boolean[] {
    if (parent === null) return this.patterns.map(() => false);
    return this.patterns.map((p, i) => parent[i] || p.test(path));
  }

  /** Whether a path with this {@link matchInfo} is excluded: the last pattern that decides wins. */
  excluded(info: boolean[]): boolean {
    let matched = false;
    this.patterns.forEach((p, i) => {
      if (p.exclusion === matched && info[i]) matched = !p.exclusion;
    });
    return matched;
  }
}

/** patternmatcher's Pattern.compile: `**` any number of directories, `*` and `?` within one, `[...]` classes, `\` escapes. */
function compileIgnore(pattern: string): (path: string) => boolean {
  const chars = Array.from(pattern);
  let re = '^';
  let type: 'exact' | 'prefix' | 'suffix' | 'regexp' = 'exact';
  let i = 0;
  while (i < chars.length) {
    const first = i === 0;
    const ch = chars[i++];
    if (ch === '*' && chars[i] === '*') {
      i++;
      if (chars[i] === '/') i++;
      if (i >= chars.length) {
        // `**` at the end: everything below.
        if (type === 'exact') type = 'prefix';
        else {
          re += '[^]*';
          type = 'regexp';
        }
      } else {
        re += '(?:[^]*/)?';
        type = 'regexp';
      }
      if (first) type = 'suffix';
    } else if (ch === '*') {
      re += '[^/]*';
      type = 'regexp';
    } else if (ch === '?') {
      re += '[^/]';
      type = 'regexp';
    } else if (ch === '\\') {
      if (i < chars.length) {
        re += reEscape(chars[i++]);
        type = 'regexp';
      } else {
        re += '\\\\';
      }
    } else if (ch === '[' || ch === ']') {
      re += ch;
      type = 'regexp';
    } else {
      re += reEscape(ch);
    }
  }
  switch (type) {
    case 'exact':
      return (p) => p === pattern;
    case 'prefix': {
      const prefix = pattern.slice(0, -2);
      return (p) => p.startsWith(prefix);
    }
    case 'suffix': {
      const suffix = pattern.slice(2);
      return (p) => p.endsWith(suffix) || (suffix.startsWith('/') && p === suffix.slice(1));
    }
    default: {
      const r = new RegExp(`${re}$`, 'u');
      return (p) => r.test(p);
    }
  }
}
