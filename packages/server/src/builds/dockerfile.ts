import { posix } from 'node:path';
import {
  SNAPSHOT_IMAGE_PREFIX,
  SNAPSHOT_NAME_PATTERN,
  TEMPLATE_IMAGE_PREFIX,
  TEMPLATE_NAME_PATTERN,
} from '@sandboxd/protocol';
import { dockerfileError, hasHeredoc, type RawInstruction, splitDockerfile } from './dockerfile-lines.js';
import {
  type BuildPlan,
  type ConfigStep,
  type CopySource,
  type CopyStep,
  DEFAULT_SHELL,
  type ImageConfig,
  type Stage,
  type StageBase,
  type Step,
} from './plan.js';
import { type EnvLookup, processWord, processWords, ShellLexError } from './shell-lex.js';

/**
 * The Dockerfile front end: a Dockerfile's text and its build args -> a {@link BuildPlan},
 * with Docker's (BuildKit's) syntax and semantics, everything resolved and checked before
 * anything runs. What sandboxd does not support is refused with the line that says it.
 * docs/templates.md ("Dockerfile reference") is the user's side of this file.
 *
 * ConfigStep `set`s carry what the instruction changes: `env` and `labels` are merged by key
 * over the current config, `exposedPorts` are added to the current ones, every other field
 * replaces the current value.
 */

export interface ParseDockerfileOptions {
  /** `--build-arg`s: values of `ARG`s (an arg no ARG declares is simply unused). */
  buildArgs?: Record<string, string>;
  /**
   * The config of a base image (`FROM <ref>`, the ref as the plan names it), when the caller
   * knows it: its env (for `$PATH` in `ENV PATH=...:$PATH`), working dir (relative WORKDIR
   * and COPY destinations), shell. Absent, or `undefined` for a ref: {@link DEFAULT_BASE_CONFIG}.
   * {@link dockerfileBaseImages} lists the refs to look up first.
   */
  baseConfig?: (ref: string) => Partial<ImageConfig> | undefined;
}

/** Largest Dockerfile accepted (bytes of UTF-8). */
export const MAX_DOCKERFILE_BYTES = 1024 * 1024;
/** Stages (FROMs) at most. */
export const MAX_STAGES = 100;
/** The PATH Docker assumes when an image sets none. */
export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** The config of a base image whose own is not known (and of `scratch`). */
export const DEFAULT_BASE_CONFIG: ImageConfig = {
  env: { PATH: DEFAULT_PATH },
  workingDir: '/',
  user: '',
  entrypoint: null,
  cmd: null,
  labels: {},
  exposedPorts: [],
  shell: DEFAULT_SHELL,
};

/** The platform sandboxd builds for, and the automatic platform ARGs of the global scope. */
const PLATFORM_ARGS: Record<string, string> = {
  BUILDPLATFORM: 'linux/amd64',
  BUILDOS: 'linux',
  BUILDOSVERSION: '',
  BUILDARCH: 'amd64',
  BUILDVARIANT: '',
  TARGETPLATFORM: 'linux/amd64',
  TARGETOS: 'linux',
  TARGETOSVERSION: '',
  TARGETARCH: 'amd64',
  TARGETVARIANT: '',
};
const AMD64_PLATFORMS = new Set(['linux/amd64', 'linux/x86_64', 'linux/x86-64', 'linux/amd64/v1', 'linux']);

/** Docker's predefined ARGs: given as build args, RUN sees them without an ARG. */
const PROXY_ARGS = [
  'HTTP_PROXY',
  'http_proxy',
  'HTTPS_PROXY',
  'https_proxy',
  'FTP_PROXY',
  'ftp_proxy',
  'NO_PROXY',
  'no_proxy',
  'ALL_PROXY',
  'all_proxy',
];

const STAGE_NAME_RE = /^[a-z][a-z0-9-_.]*$/u;
const SNAPSHOT_NAME_RE = new RegExp(SNAPSHOT_NAME_PATTERN, 'u');
const TEMPLATE_NAME_RE = new RegExp(TEMPLATE_NAME_PATTERN, 'u');
/** Docker's reference grammar (distribution/reference): `[domain/]path[:tag][@digest]`. */
const IMAGE_REF_RE = (() => {
  const alnum = '[a-z0-9]+';
  const pathComponent = `${alnum}(?:(?:[._]|__|-+)${alnum})*`;
  const domainComponent = '(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])';
  const domain = `${domainComponent}(?:\\.${domainComponent})*(?::[0-9]+)?`;
  const name = `(?:${domain}/)?${pathComponent}(?:/${pathComponent})*`;
  const tag = '[\\w][\\w.-]{0,127}';
  const digest = '[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}';
  return new RegExp(`^${name}(?::${tag})?(?:@${digest})?$`, 'u');
})();

/** What each instruction says, checked but not yet evaluated. */
type Command =
  | { k: 'arg'; pairs: { key: string; value?: string }[] }
  | { k: 'env' | 'label'; pairs: { key: string; value: string }[] }
  | { k: 'maintainer'; value: string }
  | { k: 'expose'; ports: string[] }
  | { k: 'user' | 'workdir'; value: string }
  | { k: 'shell'; argv: string[] }
  | { k: 'run' | 'cmd' | 'entrypoint'; json: boolean; args: string[] }
  | {
      k: 'copy';
      add: boolean;
      unpack: boolean;
      sources: string[];
      dest: string;
      from?: string;
      chown?: string;
      chmod?: string;
    };

type Parsed = Command & { ins: RawInstruction };

interface RawStage {
  ins: RawInstruction;
  /** As written (`$VAR`s unexpanded). */
  base: string;
  platform?: string;
  name?: string;
  commands: Parsed[];
}

/** A stage with its base and `COPY --from`s resolved (indexes in the Dockerfile's order). */
interface ResolvedStage extends RawStage {
  baseOf: { kind: 'image'; ref: string } | { kind: 'stage'; stage: number };
  copyFrom: Map<Parsed, { kind: 'image'; ref: string } | { kind: 'stage'; stage: number }>;
}

/**
 * Parses a Dockerfile into a build plan. Throws a `validation` SandboxdError
 * (`Dockerfile line N: <what>`, details `{line, instruction}`) for the first problem found.
 */
export function parseDockerfile(text: string, o: ParseDockerfileOptions = {}): BuildPlan {
  return withBudget(() => evaluate(resolve(text, o.buildArgs ?? {}), o));
}

/** Characters all substitutions of one Dockerfile may produce (each word is bounded too: shell-lex.ts). */
export const MAX_SUBSTITUTED_CHARS = 16 * 2 ** 20;
/** What the substitutions of the Dockerfile being parsed may still produce (parsing is synchronous). */
let budget: { left: number } | null = null;

/** `f` with a fresh substitution budget (nested calls share the outer one). */
function withBudget<T>(f: () => T): T {
  if (budget) return f();
  budget = { left: MAX_SUBSTITUTED_CHARS };
  try {
    return f();
  } finally {
    budget = null;
  }
}

/** Takes `n` characters from the budget: a Dockerfile whose variables grow without end is refused by line. */
function spend(ins: RawInstruction, what: string, n: number): void {
  if (!budget) return;
  budget.left -= n;
  if (budget.left < 0)
    throw dockerfileError(
      ins.line,
      ins.text,
      `${what}: the Dockerfile's substitutions are over ${MAX_SUBSTITUTED_CHARS} characters in total`,
    );
}

/**
 * The image refs the stages the result needs start from or copy from (`FROM <ref>`,
 * `COPY --from=<ref>`), after build args, without `scratch`: what a caller looks up before
 * {@link parseDockerfile} with `baseConfig`. Throws like {@link parseDockerfile}.
 */
export function dockerfileBaseImages(text: string, o: Pick<ParseDockerfileOptions, 'buildArgs'> = {}): string[] {
  return withBudget(() => baseImagesOf(text, o));
}

function baseImagesOf(text: string, o: Pick<ParseDockerfileOptions, 'buildArgs'>): string[] {
  const front = resolve(text, o.buildArgs ?? {});
  const refs = new Set<string>();
  for (const i of front.needed) {
    const s = front.stages[i];
    if (s.baseOf.kind === 'image' && s.baseOf.ref !== 'scratch') refs.add(s.baseOf.ref);
    for (const f of s.copyFrom.values()) if (f.kind === 'image') refs.add(f.ref);
  }
  return [...refs];
}

interface Front {
  stages: ResolvedStage[];
  /** Indexes of the stages the target needs, ascending; the last is the target. */
  needed: number[];
  globals: Map<string, string>;
  buildArgs: Record<string, string>;
  /** The escape character (`# escape=`), for every substitution. */
  esc: string;
}

/** Splits, checks every instruction, evaluates the global ARGs and resolves each stage's base and `--from`s. */
function resolve(text: string, buildArgs: Record<string, string>): Front {
  if (Buffer.byteLength(text) > MAX_DOCKERFILE_BYTES) {
    throw dockerfileError(1, '', `the Dockerfile is over ${MAX_DOCKERFILE_BYTES} bytes`);
  }
  const { esc, instructions } = splitDockerfile(text);
  if (instructions.length === 0) throw dockerfileError(1, '', 'the Dockerfile has no instructions (it needs a FROM)');

  const metaArgs: Parsed[] = [];
  const raw: RawStage[] = [];
  for (const ins of instructions) {
    if (ins.cmd === 'from') {
      if (raw.length >= MAX_STAGES) throw dockerfileError(ins.line, ins.text, `more than ${MAX_STAGES} stages`);
      raw.push(parseFrom(ins, raw));
      continue;
    }
    const c = parseInstruction(ins, esc);
    if (raw.length === 0) {
      if (c.k !== 'arg') {
        throw dockerfileError(
          ins.line,
          ins.text,
          `${ins.keyword.toUpperCase()} before the first FROM: only ARG may come before FROM`,
        );
      }
      metaArgs.push(c);
      continue;
    }
    raw[raw.length - 1].commands.push(c);
  }
  if (raw.length === 0) throw dockerfileError(metaArgs[0].ins.line, metaArgs[0].ins.text, 'the Dockerfile has no FROM');

  const globals = new Map(Object.entries(PLATFORM_ARGS));
  for (const [k, v] of Object.entries(buildArgs)) if (globals.has(k)) globals.set(k, v);
  for (const c of metaArgs) {
    if (c.k !== 'arg') continue;
    for (const p of c.pairs) {
      const v = Object.hasOwn(buildArgs, p.key)
        ? buildArgs[p.key]
        : p.value !== undefined
          ? expand(c.ins, 'ARG', p.value, (n) => globals.get(n), esc)
          : undefined;
      if (v !== undefined) globals.set(p.key, v);
    }
  }

  const names = new Map<string, number>();
  raw.forEach((s, i) => {
    if (s.name !== undefined) names.set(s.name, i);
  });
  const stages: ResolvedStage[] = raw.map((s, i) => {
    const lookup: EnvLookup = (n) => globals.get(n);
    const base = expand(s.ins, 'FROM', s.base, lookup, esc);
    if (base === '') throw dockerfileError(s.ins.line, s.ins.text, `base name (${s.base}) should not be blank`);
    if (s.platform !== undefined) {
      const p = expand(s.ins, 'FROM', s.platform, lookup, esc).toLowerCase();
      if (!AMD64_PLATFORMS.has(p)) {
        throw dockerfileError(
          s.ins.line,
          s.ins.text,
          `--platform=${p || s.platform}: only linux/amd64 images are built`,
        );
      }
    }
    const earlier = names.get(base);
    if (earlier !== undefined && earlier >= i) {
      throw dockerfileError(
        s.ins.line,
        s.ins.text,
        earlier === i
          ? `FROM ${base} names this stage itself`
          : `FROM ${base} names a later stage (a stage can build only on stages before it)`,
      );
    }
    const baseOf =
      earlier !== undefined && earlier < i
        ? { kind: 'stage' as const, stage: earlier }
        : { kind: 'image' as const, ref: checkImageRef(s.ins, 'FROM', base) };
    const copyFrom = new Map<Parsed, ResolvedStage['baseOf']>();
    for (const c of s.commands) {
      if (c.k === 'copy' && c.from !== undefined) {
        copyFrom.set(c, resolveCopyFrom(c, c.from, i, names, raw.length, esc));
      }
    }
    return { ...s, baseOf, copyFrom };
  });

  const needed = new Set<number>();
  const visit = (i: number): void => {
    if (needed.has(i)) return;
    needed.add(i);
    const s = stages[i];
    if (s.baseOf.kind === 'stage') visit(s.baseOf.stage);
    for (const f of s.copyFrom.values()) if (f.kind === 'stage') visit(f.stage);
  };
  visit(stages.length - 1);
  return { stages, needed: [...needed].sort((a, b) => a - b), globals, buildArgs, esc };
}

function resolveCopyFrom(
  c: Parsed,
  from: string,
  self: number,
  names: Map<string, number>,
  count: number,
  esc: string,
): ResolvedStage['baseOf'] {
  let same: string;
  try {
    same = processWord(from, () => undefined, esc);
  } catch {
    same = '';
  }
  if (same !== from) {
    throw dockerfileError(
      c.ins.line,
      c.ins.text,
      'variable expansion is not supported for --from: define a stage with FROM $VAR (a global ARG) and copy from it',
    );
  }
  if (from === '')
    throw dockerfileError(c.ins.line, c.ins.text, '--from needs a stage name, a stage index or an image');
  let stage: number | undefined;
  if (/^[+-]?\d+$/u.test(from)) {
    stage = Number(from);
    if (stage < 0 || stage >= count)
      throw dockerfileError(c.ins.line, c.ins.text, `--from=${from}: invalid stage index ${stage}`);
  } else {
    stage = names.get(from.toLowerCase());
  }
  if (stage === undefined) return { kind: 'image', ref: checkImageRef(c.ins, 'COPY --from', from) };
  if (stage === self) throw dockerfileError(c.ins.line, c.ins.text, `--from=${from} names the stage it is in`);
  if (stage > self)
    throw dockerfileError(
      c.ins.line,
      c.ins.text,
      `--from=${from} names a later stage (a stage can copy only from stages before it)`,
    );
  return { kind: 'stage', stage };
}

function checkImageRef(ins: RawInstruction, what: string, ref: string): string {
  if (ref === 'scratch') return ref;
  let ok: boolean;
  if (ref.startsWith(SNAPSHOT_IMAGE_PREFIX)) {
    ok = SNAPSHOT_NAME_RE.test(ref.slice(SNAPSHOT_IMAGE_PREFIX.length));
  } else if (ref.startsWith(TEMPLATE_IMAGE_PREFIX)) {
    const rest = ref.slice(TEMPLATE_IMAGE_PREFIX.length);
    const colon = rest.indexOf(':');
    const name = colon < 0 ? rest : rest.slice(0, colon);
    const tag = colon < 0 ? 'latest' : rest.slice(colon + 1);
    ok = TEMPLATE_NAME_RE.test(name) && /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/u.test(tag);
  } else {
    ok = ref.length <= 512 && IMAGE_REF_RE.test(ref);
  }
  if (!ok) {
    throw dockerfileError(
      ins.line,
      ins.text,
      `${what}: "${ref}" is not a valid image reference (name[:tag][@digest], lowercase repository names)`,
    );
  }
  return ref;
}

// ---------------------------------------------------------------------------------------
// Checking each instruction
// ---------------------------------------------------------------------------------------

function parseFrom(ins: RawInstruction, before: RawStage[]): RawStage {
  const flags = parseFlags(ins, { platform: 'string' });
  const args = ins.rest === '' ? [] : ins.rest.split(/[\t\v\f\r ]+/u);
  let name: string | undefined;
  if (args.length === 3 && args[1].toLowerCase() === 'as') {
    name = args[2].toLowerCase();
    if (!STAGE_NAME_RE.test(name)) {
      throw dockerfileError(
        ins.line,
        ins.text,
        `invalid name for build stage: "${args[2]}": a name starts with a letter and holds letters, digits, -, _ and .`,
      );
    }
    const dup = before.find((s) => s.name === name);
    if (dup) throw dockerfileError(ins.line, ins.text, `stage name "${name}" is already used on line ${dup.ins.line}`);
  } else if (args.length !== 1) {
    throw dockerfileError(ins.line, ins.text, 'FROM requires either one or three arguments: FROM <image> [AS <name>]');
  }
  return { ins, base: args[0], platform: flags.get('platform'), name, commands: [] };
}

const REFUSED: Record<string, string> = {
  onbuild: 'ONBUILD is not supported',
  healthcheck:
    'HEALTHCHECK is not supported: use the labels org.sandboxd.start.cmd (a command run when a sandbox starts) and org.sandboxd.ready.cmd (a check the create waits for), e.g. LABEL org.sandboxd.ready.cmd="curl -fs localhost:8080"',
  volume: 'VOLUME is not supported: use named volumes when creating a sandbox',
  stopsignal: 'STOPSIGNAL is not supported: sandboxes are stopped by sandboxd',
};

const UNSUPPORTED_FLAGS: Record<string, Record<string, string>> = {
  run: {
    mount: 'RUN --mount is not supported',
    network: 'RUN --network is not supported: a build reaches what its allowDomains allow',
    security: 'RUN --security is not supported',
    device: 'RUN --device is not supported',
  },
  copy: { parents: 'COPY --parents is not supported', exclude: 'COPY --exclude is not supported: use .dockerignore' },
  add: {
    checksum: 'ADD --checksum is not supported (ADD of URLs and git repositories is not supported)',
    'keep-git-dir': 'ADD --keep-git-dir is not supported (ADD of git repositories is not supported)',
    exclude: 'ADD --exclude is not supported: use .dockerignore',
  },
};

function parseInstruction(ins: RawInstruction, esc: string): Parsed {
  const refused = REFUSED[ins.cmd];
  if (refused) throw dockerfileError(ins.line, ins.text, refused);
  const up = ins.cmd.toUpperCase();
  switch (ins.cmd) {
    case 'arg': {
      parseFlags(ins, {});
      const words = parseWords(ins.rest, esc);
      if (words.length === 0) throw dockerfileError(ins.line, ins.text, 'ARG requires at least one argument');
      const pairs = words.map((w) => {
        const eq = w.indexOf('=');
        const key = eq < 0 ? w : w.slice(0, eq);
        if (key === '') throw dockerfileError(ins.line, ins.text, 'ARG names can not be blank');
        if (key === '__proto__') throw dockerfileError(ins.line, ins.text, 'ARG name __proto__ is not allowed');
        return eq < 0 ? { key } : { key, value: w.slice(eq + 1) };
      });
      return { k: 'arg', pairs, ins };
    }
    case 'env':
    case 'label': {
      parseFlags(ins, {});
      return { k: ins.cmd, pairs: parseNameValues(ins, up, esc), ins };
    }
    case 'maintainer':
      parseFlags(ins, {});
      if (ins.rest === '') throw dockerfileError(ins.line, ins.text, 'MAINTAINER requires exactly one argument');
      return { k: 'maintainer', value: ins.rest, ins };
    case 'expose': {
      parseFlags(ins, {});
      if (ins.rest === '') throw dockerfileError(ins.line, ins.text, 'EXPOSE requires at least one argument');
      return { k: 'expose', ports: ins.rest.split(/[\t\v\f\r ]+/u), ins };
    }
    case 'user':
    case 'workdir':
      parseFlags(ins, {});
      if (ins.rest === '') throw dockerfileError(ins.line, ins.text, `${up} requires exactly one argument`);
      return { k: ins.cmd, value: ins.rest, ins };
    case 'shell': {
      parseFlags(ins, {});
      const json = parseJsonArray(ins);
      if (!json)
        throw dockerfileError(
          ins.line,
          ins.text,
          'SHELL requires the arguments to be in JSON form: SHELL ["executable", "parameters"]',
        );
      if (json.length === 0) throw dockerfileError(ins.line, ins.text, 'SHELL requires at least one argument');
      return { k: 'shell', argv: json, ins };
    }
    case 'run':
    case 'cmd':
    case 'entrypoint': {
      parseFlags(ins, {}, UNSUPPORTED_FLAGS[ins.cmd]);
      const json = parseJsonArray(ins);
      if (hasHeredoc(ins, json !== null)) {
        throw dockerfileError(
          ins.line,
          ins.text,
          `heredocs (<<EOF) are not supported: write the file with COPY or use ${up} with a command`,
        );
      }
      if (json) return { k: ins.cmd, json: true, args: json, ins };
      if (ins.rest === '') throw dockerfileError(ins.line, ins.text, `${up} requires a command`);
      return { k: ins.cmd, json: false, args: [ins.rest], ins };
    }
    case 'copy':
    case 'add': {
      const add = ins.cmd === 'add';
      const flags = parseFlags(
        ins,
        add
          ? { chown: 'string', chmod: 'string', link: 'bool', unpack: 'bool' }
          : { chown: 'string', chmod: 'string', link: 'bool', from: 'string' },
        UNSUPPORTED_FLAGS[ins.cmd],
      );
      const json = parseJsonArray(ins);
      if (hasHeredoc(ins, json !== null)) {
        throw dockerfileError(
          ins.line,
          ins.text,
          'heredocs (<<EOF) are not supported: put the file in the build context',
        );
      }
      const args = json ?? (ins.rest === '' ? [] : ins.rest.split(/[\t\v\f\r ]+/u));
      if (args.length < 2) {
        throw dockerfileError(ins.line, ins.text, `${up} requires at least two arguments: ${up} <src>... <dest>`);
      }
      return {
        k: 'copy',
        add,
        unpack: add && flags.get('unpack') !== 'false',
        sources: args.slice(0, -1),
        dest: args[args.length - 1],
        from: flags.get('from'),
        chown: flags.get('chown'),
        chmod: flags.get('chmod'),
        ins,
      };
    }
    case 'from':
      throw new Error('unreachable: FROM is parsed by parseFrom');
    default:
      throw dockerfileError(ins.line, ins.text, `unknown instruction: ${ins.keyword}`);
  }
}

/**
 * BuildKit's flag rules: `--name=value` for strings, `--name` or `--name=true|false` for
 * booleans, each at most once; anything else is an unknown flag.
 */
function parseFlags(
  ins: RawInstruction,
  spec: Record<string, 'bool' | 'string'>,
  unsupported: Record<string, string> = {},
): Map<string, string> {
  const out = new Map<string, string>();
  for (const a of ins.flags) {
    if (!a.startsWith('--')) throw dockerfileError(ins.line, ins.text, `arg should start with -- : ${a}`);
    const eq = a.indexOf('=');
    const flag = eq < 0 ? a : a.slice(0, eq);
    const name = flag.slice(2);
    const value = eq < 0 ? undefined : a.slice(eq + 1);
    const why = Object.hasOwn(unsupported, name) ? unsupported[name] : undefined;
    if (why) throw dockerfileError(ins.line, ins.text, why);
    const type = Object.hasOwn(spec, name) ? spec[name] : undefined;
    if (!type) throw dockerfileError(ins.line, ins.text, `unknown flag: ${flag}`);
    if (out.has(name)) throw dockerfileError(ins.line, ins.text, `duplicate flag specified: ${flag}`);
    if (type === 'string') {
      if (value === undefined)
        throw dockerfileError(ins.line, ins.text, `missing a value on flag: ${flag} (write ${flag}=<value>)`);
      out.set(name, value);
    } else {
      if (value === '') throw dockerfileError(ins.line, ins.text, `missing a value on flag: ${flag}`);
      const v = (value ?? 'true').toLowerCase();
      if (v !== 'true' && v !== 'false') {
        throw dockerfileError(ins.line, ins.text, `expecting boolean value for flag ${flag}, not: ${value}`);
      }
      out.set(name, v);
    }
  }
  return out;
}

/** The exec (JSON) form's array, or null for the shell form; a JSON array of non-strings is an error. */
function parseJsonArray(ins: RawInstruction): string[] | null {
  const rest = ins.rest;
  if (!rest.startsWith('[')) return null;
  let v: unknown;
  try {
    v = JSON.parse(rest);
  } catch {
    return null;
  }
  if (!Array.isArray(v)) return null;
  if (!v.every((x) => typeof x === 'string')) {
    throw dockerfileError(ins.line, ins.text, 'when using JSON array syntax, arrays must be comprised of strings only');
  }
  return v as string[];
}

const isSpace = (c: string): boolean => /^\s$/u.test(c);

/** BuildKit's parseWords: words at unquoted whitespace, quotes and escapes kept for the later expansion. */
function parseWords(rest: string, esc: string): string[] {
  const chars = Array.from(rest);
  const words: string[] = [];
  let phase: 'spaces' | 'word' | 'quote' = 'spaces';
  let quote = '';
  let blankOk = false;
  let buf = '';
  for (let pos = 0; pos <= chars.length; pos++) {
    let ch = pos < chars.length ? chars[pos] : '';
    if (phase === 'spaces') {
      if (pos === chars.length) break;
      if (isSpace(ch)) continue;
      phase = 'word';
    }
    if (pos === chars.length) {
      if (blankOk || buf !== '') words.push(buf);
      break;
    }
    if (phase === 'word') {
      if (isSpace(ch)) {
        phase = 'spaces';
        if (blankOk || buf !== '') words.push(buf);
        buf = '';
        blankOk = false;
        continue;
      }
      if (ch === "'" || ch === '"') {
        quote = ch;
        blankOk = true;
        phase = 'quote';
      }
      if (ch === esc) {
        if (pos + 1 === chars.length) continue;
        buf += ch;
        pos++;
        ch = chars[pos];
      }
      buf += ch;
      continue;
    }
    if (ch === quote) phase = 'word';
    if (ch === esc && quote !== "'") {
      if (pos + 1 === chars.length) {
        phase = 'word';
        continue;
      }
      buf += ch;
      pos++;
      ch = chars[pos];
    }
    buf += ch;
  }
  return words;
}

/** ENV and LABEL: `KEY value...` (one pair, the rest of the line) or `K=V K2="v 2"...`. */
function parseNameValues(ins: RawInstruction, up: string, esc: string): { key: string; value: string }[] {
  const words = parseWords(ins.rest, esc);
  if (words.length === 0) throw dockerfileError(ins.line, ins.text, `${up} requires at least one argument`);
  if (!words[0].includes('=')) {
    const m = /[\t\v\f\r ]+/u.exec(ins.rest);
    if (!m) throw dockerfileError(ins.line, ins.text, `${up} must have two arguments: ${up} <key>=<value>`);
    return [{ key: ins.rest.slice(0, m.index), value: ins.rest.slice(m.index + m[0].length) }];
  }
  return words.map((w) => {
    const eq = w.indexOf('=');
    if (eq < 0) {
      throw dockerfileError(ins.line, ins.text, `can't find = in "${w}": ${up} takes <key>=<value> pairs`);
    }
    if (eq === 0) throw dockerfileError(ins.line, ins.text, `${up} names can not be blank`);
    return { key: w.slice(0, eq), value: w.slice(eq + 1) };
  });
}

/** `word` substituted, a lexing error named with its line. */
function expand(ins: RawInstruction, what: string, word: string, env: EnvLookup, esc: string): string {
  try {
    const out = processWord(word, env, esc);
    spend(ins, what, out.length);
    return out;
  } catch (e) {
    if (e instanceof ShellLexError) throw dockerfileError(ins.line, ins.text, `${what}: ${e.message}`);
    throw e;
  }
}

function expandWords(ins: RawInstruction, what: string, word: string, env: EnvLookup, esc: string): string[] {
  try {
    const out = processWords(word, env, esc);
    spend(
      ins,
      what,
      out.reduce((n, w) => n + w.length, 0),
    );
    return out;
  } catch (e) {
    if (e instanceof ShellLexError) throw dockerfileError(ins.line, ins.text, `${what}: ${e.message}`);
    throw e;
  }
}

// ---------------------------------------------------------------------------------------
// Evaluating the needed stages into the plan
// ---------------------------------------------------------------------------------------

function evaluate(front: Front, o: ParseDockerfileOptions): BuildPlan {
  const newIndex = new Map(front.needed.map((old, i) => [old, i]));
  const finalConfigs = new Map<number, ImageConfig>();
  const stages: Stage[] = front.needed.map((old) => {
    const s = front.stages[old];
    let base: StageBase;
    let start: ImageConfig;
    if (s.baseOf.kind === 'stage') {
      base = { kind: 'stage', stage: newIndex.get(s.baseOf.stage)! };
      start = finalConfigs.get(s.baseOf.stage)!;
    } else {
      base = { kind: 'image', ref: s.baseOf.ref };
      start = withDefaults(s.baseOf.ref === 'scratch' ? undefined : o.baseConfig?.(s.baseOf.ref));
    }
    const ev = new StageEvaluator(start, front, s, newIndex);
    const steps = s.commands.map((c) => ev.step(c)).filter((x): x is Step => x !== null);
    finalConfigs.set(old, ev.config);
    const stage: Stage = { line: s.ins.line, base, steps };
    if (s.name !== undefined) stage.name = s.name;
    return stage;
  });
  return { stages, target: stages.length - 1 };
}

function withDefaults(c: Partial<ImageConfig> | undefined): ImageConfig {
  const d = DEFAULT_BASE_CONFIG;
  return {
    env: { ...(c?.env ?? d.env) },
    workingDir: c?.workingDir || d.workingDir,
    user: c?.user ?? d.user,
    entrypoint: c?.entrypoint ?? d.entrypoint,
    cmd: c?.cmd ?? d.cmd,
    labels: { ...(c?.labels ?? d.labels) },
    exposedPorts: [...(c?.exposedPorts ?? d.exposedPorts)],
    shell: c?.shell && c.shell.length > 0 ? [...c.shell] : [...d.shell],
  };
}

const cloneConfig = (c: ImageConfig): ImageConfig => ({
  ...c,
  env: { ...c.env },
  labels: { ...c.labels },
  exposedPorts: [...c.exposedPorts],
  shell: [...c.shell],
  entrypoint: c.entrypoint && [...c.entrypoint],
  cmd: c.cmd && [...c.cmd],
});

class StageEvaluator {
  readonly config: ImageConfig;
  /** What `$VAR`s and RUN see: the env, with the ARGs in scope, in the order they were set. */
  private readonly state = new Map<string, string>();
  /** ARGs declared in this stage (their value is in `state`, unless they have none). */
  private readonly args = new Set<string>();
  private cmdSet = false;

  constructor(
    start: ImageConfig,
    private readonly front: Front,
    private readonly stage: ResolvedStage,
    private readonly newIndex: Map<number, number>,
  ) {
    this.config = cloneConfig(start);
    for (const [k, v] of Object.entries(this.config.env)) this.state.set(k, v);
    if (!this.state.has('PATH')) this.state.set('PATH', DEFAULT_PATH);
  }

  private readonly lookup: EnvLookup = (n) => this.state.get(n);

  /** `word` substituted with what this stage has set so far. */
  private sub(ins: RawInstruction, what: string, word: string): string {
    return expand(ins, what, word, this.lookup, this.front.esc);
  }

  step(c: Parsed): Step | null {
    const { ins } = c;
    const base = { line: ins.line, text: ins.text };
    const config = (set: Partial<ImageConfig>): ConfigStep => ({ ...base, kind: 'config', set });
    switch (c.k) {
      case 'arg':
        for (const p of c.pairs) {
          const v = Object.hasOwn(this.front.buildArgs, p.key)
            ? this.front.buildArgs[p.key]
            : p.value !== undefined
              ? this.sub(ins, 'ARG', p.value)
              : this.front.globals.get(p.key);
          this.args.add(p.key);
          if (v !== undefined) this.state.set(p.key, v);
        }
        return null;
      case 'env':
      case 'label': {
        const what = c.k.toUpperCase();
        const pairs = c.pairs.map((p) => [this.sub(ins, what, p.key), this.sub(ins, what, p.value)]);
        const set: Record<string, string> = {};
        for (const [k, v] of pairs) {
          if (k === '') throw dockerfileError(ins.line, ins.text, `${what} names can not be blank`);
          if (k === '__proto__') throw dockerfileError(ins.line, ins.text, `${what} name __proto__ is not allowed`);
          if (c.k === 'env' && k.includes('=')) throw dockerfileError(ins.line, ins.text, `ENV name "${k}" holds =`);
          set[k] = v;
          if (c.k === 'env') {
            this.config.env[k] = v;
            this.state.set(k, v);
          } else {
            this.config.labels[k] = v;
          }
        }
        return config(c.k === 'env' ? { env: set } : { labels: set });
      }
      case 'maintainer':
        this.config.labels.maintainer = c.value;
        return config({ labels: { maintainer: c.value } });
      case 'expose': {
        const ports = new Set<string>();
        for (const raw of c.ports)
          for (const w of expandWords(ins, 'EXPOSE', raw, this.lookup, this.front.esc)) ports.add(parsePort(ins, w));
        const added = [...ports].sort(comparePorts);
        this.config.exposedPorts = [...new Set([...this.config.exposedPorts, ...added])].sort(comparePorts);
        return config({ exposedPorts: added });
      }
      case 'user': {
        const user = this.sub(ins, 'USER', c.value);
        if (!/^[^\s:]+(:[^\s:]+)?$/u.test(user)) {
          throw dockerfileError(ins.line, ins.text, `USER "${user}": expected <user>[:<group>] (names or numeric ids)`);
        }
        this.config.user = user;
        return config({ user });
      }
      case 'workdir': {
        const p = this.sub(ins, 'WORKDIR', c.value);
        if (p === '') throw dockerfileError(ins.line, ins.text, 'WORKDIR requires a path');
        const path = posix.isAbsolute(p) ? posix.normalize(p) : posix.join('/', this.config.workingDir, p);
        const clean = path.length > 1 ? path.replace(/\/+$/u, '') : path;
        this.config.workingDir = clean;
        if (clean === '/') return config({ workingDir: '/' });
        return { ...base, kind: 'workdir', path: clean };
      }
      case 'shell':
        this.config.shell = [...c.argv];
        return config({ shell: [...c.argv] });
      case 'cmd':
      case 'entrypoint':
      case 'run': {
        const argv = c.json ? [...c.args] : [...this.config.shell, c.args[0]];
        if (c.k === 'run') {
          if (argv.length === 0) throw dockerfileError(ins.line, ins.text, 'RUN requires a command');
          return { ...base, kind: 'run', argv, args: this.runArgs() };
        }
        if (c.k === 'cmd') {
          this.config.cmd = argv;
          this.cmdSet = true;
          return config({ cmd: argv });
        }
        const entrypoint = argv.length === 0 ? null : argv;
        this.config.entrypoint = entrypoint;
        if (this.cmdSet) return config({ entrypoint });
        this.config.cmd = null;
        return config({ entrypoint, cmd: null });
      }
      case 'copy':
        return this.copy(c, base);
    }
  }

  /** ARGs in scope whose value RUN must see over the image's env (Docker: the later of ARG and ENV wins). */
  private runArgs(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const k of this.args) {
      const v = this.state.get(k);
      if (v !== undefined && this.config.env[k] !== v) out[k] = v;
    }
    for (const k of PROXY_ARGS) {
      if (Object.hasOwn(this.front.buildArgs, k) && !this.args.has(k) && this.config.env[k] === undefined) {
        out[k] = this.front.buildArgs[k];
      }
    }
    return out;
  }

  private copy(c: Extract<Parsed, { k: 'copy' }>, base: { line: number; text: string }): CopyStep {
    const { ins } = c;
    const what = c.add ? 'ADD' : 'COPY';
    const resolved = this.stage.copyFrom.get(c);
    const from: CopySource =
      resolved === undefined
        ? { kind: 'context' }
        : resolved.kind === 'stage'
          ? { kind: 'stage', stage: this.newIndex.get(resolved.stage)! }
          : { kind: 'image', ref: resolved.ref };
    const sources = c.sources.map((raw) => {
      const src = this.sub(ins, what, raw);
      if (/^(https?|git|ssh):\/\//iu.test(src) || /^git@/u.test(src)) {
        throw dockerfileError(
          ins.line,
          ins.text,
          `${what} of a URL or git repository (${src}) is not supported: fetch it with RUN (curl, wget, git) within the build's allowDomains`,
        );
      }
      const joined = posix.join('/', src);
      const abs = joined.length > 1 ? joined.replace(/\/+$/u, '') : joined;
      if (from.kind !== 'context') return abs;
      return abs === '/' ? '.' : abs.slice(1);
    });
    const rawDest = this.sub(ins, what, c.dest);
    const dest = resolveDest(rawDest, this.config.workingDir);
    const step: CopyStep = { ...base, kind: 'copy', from, sources, dest };
    if (c.chown !== undefined) {
      const chown = this.sub(ins, `${what} --chown`, c.chown);
      if (!/^[^\s:]+(:[^\s:]+)?$/u.test(chown)) {
        throw dockerfileError(ins.line, ins.text, `--chown=${chown}: expected <user>[:<group>] (names or numeric ids)`);
      }
      step.chown = chown;
    }
    if (c.chmod !== undefined) {
      const chmod = this.sub(ins, `${what} --chmod`, c.chmod);
      if (!/^[0-7]{1,4}$/u.test(chmod)) {
        throw dockerfileError(
          ins.line,
          ins.text,
          `--chmod=${chmod}: only octal modes (0000-7777, e.g. --chmod=755) are supported`,
        );
      }
      step.chmod = Number.parseInt(chmod, 8);
    }
    if (c.unpack) step.add = true;
    return step;
  }
}

/** A COPY destination made absolute against the working dir; a trailing `/` (or `.`) kept as `/`. */
function resolveDest(dest: string, workingDir: string): string {
  const d = dest === '' || dest === '.' ? './' : dest;
  const dir = d.endsWith('/') || d.endsWith('/.');
  const abs = posix.isAbsolute(d) ? posix.normalize(d) : posix.join('/', workingDir, d);
  const clean = abs.length > 1 ? abs.replace(/\/+$/u, '') : abs;
  return dir && clean !== '/' ? `${clean}/` : clean;
}

/** `80`, `80/tcp`, `53/udp`, `9/sctp` -> `80/tcp`...; ranges and host ports are refused. */
function parsePort(ins: RawInstruction, raw: string): string {
  if (raw.includes(':')) {
    throw dockerfileError(
      ins.line,
      ins.text,
      `EXPOSE ${raw}: only a container port is exposed (no host port or address)`,
    );
  }
  const slash = raw.indexOf('/');
  const num = slash < 0 ? raw : raw.slice(0, slash);
  const proto = slash < 0 ? 'tcp' : raw.slice(slash + 1).toLowerCase();
  if (num.includes('-')) throw dockerfileError(ins.line, ins.text, `EXPOSE ${raw}: port ranges are not supported`);
  if (!['tcp', 'udp', 'sctp'].includes(proto)) {
    throw dockerfileError(ins.line, ins.text, `EXPOSE ${raw}: invalid protocol "${proto}" (tcp, udp or sctp)`);
  }
  if (!/^\d{1,5}$/u.test(num) || Number(num) < 1 || Number(num) > 65535) {
    throw dockerfileError(ins.line, ins.text, `EXPOSE ${raw}: invalid port (1-65535)`);
  }
  return `${Number(num)}/${proto}`;
}

function comparePorts(a: string, b: string): number {
  const [pa, qa] = a.split('/');
  const [pb, qb] = b.split('/');
  return Number(pa) - Number(pb) || qa.localeCompare(qb);
}
