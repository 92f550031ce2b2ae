import { posix } from 'node:path';
import {
  type BuildLogEvent,
  DEFAULT_TEMPLATE_TAG,
  SandboxdError,
  TEMPLATE_IMAGE_PREFIX,
  TEMPLATE_NAME_PATTERN,
  TEMPLATE_TAG_PATTERN,
} from '@sandboxd/protocol';
import { type Static, Type } from 'typebox';
import type { BuildPlan, ConfigStep, Step } from '../builds/plan.js';
import type { BuildRecord, TemplateRecord } from '../builds/types.js';
import type { E2bTemplate } from '../config.js';

/*
 * E2B's template builder (npm `e2b`'s `Template`, what `Template.build` sends) as sandboxd
 * takes it: the request bodies, template names and tags, the compiler of E2B's steps into
 * sandboxd's BuildPlan (builds/plan.ts), and the mapping of sandboxd's builds back to E2B's
 * build status. Pure: the routes (templates-routes.ts) call the builds service.
 *
 * E2B's `templateID` is the template's name here (so `Sandbox.create('<name>')` names it),
 * its `buildID` sandboxd's build id, its tags the template's tags (`latest` when none).
 */

/** E2B's "default" tag is sandboxd's `latest`. */
const E2B_DEFAULT_TAG = 'default';

/** Labels the runtime reads: the command a sandbox of the image starts with, and its ready check. */
export const START_CMD_LABEL = 'org.sandboxd.start.cmd';
export const READY_CMD_LABEL = 'org.sandboxd.ready.cmd';

/** Most steps one build may have. */
export const MAX_TEMPLATE_STEPS = 1000;

/**
 * Images E2B's SDK names that stand for one of E2B's templates: `Template()` and
 * `fromBaseImage()` build from `e2bdev/base`, which is E2B's `base` (sandboxd's Debian image
 * as `user`, through the configured E2B templates).
 */
export const E2B_IMAGE_TEMPLATES: Readonly<Record<string, string>> = {
  'e2bdev/base': 'base',
  'e2bdev/code-interpreter': 'code-interpreter-v1',
};

// --- request bodies -----------------------------------------------------------------------

const Tag = Type.String({ maxLength: 128 });

/**
 * `POST /v3/templates` (E2B's `TemplateBuildRequestV3`). Fields the door does not use are
 * taken (the SDK adds some over versions); the ones it uses are validated.
 */
export const TemplateRequestSchema = Type.Object(
  {
    name: Type.Optional(Type.String({ maxLength: 256 })),
    /** Deprecated in E2B: `name`. */
    alias: Type.Optional(Type.String({ maxLength: 256 })),
    tags: Type.Optional(Type.Array(Tag, { maxItems: 64 })),
    cpuCount: Type.Optional(Type.Integer({ minimum: 1 })),
    memoryMB: Type.Optional(Type.Integer({ minimum: 1 })),
  },
  { additionalProperties: true },
);
export type TemplateRequest = Static<typeof TemplateRequestSchema>;

const StepArg = Type.String({ maxLength: 131_072 });

/** One of E2B's `TemplateStep`s. */
export const TemplateStepSchema = Type.Object(
  {
    type: Type.String({ minLength: 1, maxLength: 64 }),
    args: Type.Optional(Type.Array(StepArg, { maxItems: 2048 })),
    filesHash: Type.Optional(Type.Union([Type.String({ maxLength: 256 }), Type.Null()])),
    force: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
  },
  { additionalProperties: true },
);
export type TemplateStep = Static<typeof TemplateStepSchema>;

/** `POST /v2/templates/{templateID}/builds/{buildID}` (E2B's `TemplateBuildStartV2`). */
export const TemplateBuildStartSchema = Type.Object(
  {
    fromImage: Type.Optional(Type.Union([Type.String({ maxLength: 1024 }), Type.Null()])),
    fromTemplate: Type.Optional(Type.Union([Type.String({ maxLength: 1024 }), Type.Null()])),
    fromImageRegistry: Type.Optional(Type.Unknown()),
    force: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
    steps: Type.Optional(Type.Array(TemplateStepSchema, { maxItems: MAX_TEMPLATE_STEPS })),
    startCmd: Type.Optional(Type.Union([Type.String({ maxLength: 16_000 }), Type.Null()])),
    readyCmd: Type.Optional(Type.Union([Type.String({ maxLength: 16_000 }), Type.Null()])),
  },
  { additionalProperties: true },
);
export type TemplateBuildStart = Static<typeof TemplateBuildStartSchema>;

// --- names and tags -----------------------------------------------------------------------

const NAME = new RegExp(TEMPLATE_NAME_PATTERN);
const TAG = new RegExp(TEMPLATE_TAG_PATTERN);

const invalid = (where: 'body' | 'path' | 'query', path: string, message: string): SandboxdError =>
  new SandboxdError('validation', message, [{ in: where, path, message }]);

/** A tag as E2B spells it, as sandboxd keeps it: trimmed, lowercased, `default` is `latest`. */
export function normalizeTag(raw: string, where: 'body' | 'path' | 'query', path: string): string {
  const t = raw.trim().toLowerCase();
  if (t === E2B_DEFAULT_TAG) return DEFAULT_TEMPLATE_TAG;
  if (!TAG.test(t))
    throw invalid(
      where,
      path,
      `tag '${raw}' is not a tag: letters, digits, '_', '.' and '-', not starting with '.' or '-', at most 128`,
    );
  return t;
}

/**
 * `name` or `name:tag` as E2B's API takes it (trimmed, lowercased); `tag` undefined when the
 * input names none. `validation` (naming `path`) for a namespace (`team/name`), a bad name
 * or a bad tag.
 */
export function parseTemplateName(
  input: string,
  where: 'body' | 'path' | 'query' = 'body',
  path = '/name',
): { name: string; tag: string | undefined } {
  const s = input.trim().toLowerCase();
  const colon = s.indexOf(':');
  const name = colon === -1 ? s : s.slice(0, colon);
  const tag = colon === -1 ? undefined : normalizeTag(s.slice(colon + 1), where, path);
  if (name.includes('/'))
    throw invalid(
      where,
      path,
      `template '${input}': namespaces (team/name) are not supported; name the template alone`,
    );
  if (!NAME.test(name))
    throw invalid(
      where,
      path,
      `template name '${name}' is not a name: lowercase letters, digits, '_', '.' and '-', starting with a letter or digit, at most 63`,
    );
  return { name, tag };
}

/** The image a create names for a template: `templates/<name>:<tag>`. */
export const templateImage = (name: string, tag: string): string => `${TEMPLATE_IMAGE_PREFIX}${name}:${tag}`;

/**
 * The name and tags of `POST /v3/templates`: `name` (or the deprecated `alias`) may carry a
 * tag (`name:tag`), which comes first; then `tags`, deduplicated; none at all is `latest`.
 * A name that is one of the server's E2B template names (`base`, ...) is refused: a create
 * of that name gives the configured template, so the build could never be used.
 */
export function requestedNameAndTags(
  b: TemplateRequest,
  configured: Readonly<Record<string, E2bTemplate>>,
): { name: string; tags: string[] } {
  const raw = b.name ?? b.alias;
  if (raw === undefined || raw.trim() === '') throw invalid('body', '/name', 'name is required');
  const { name, tag } = parseTemplateName(raw, 'body', b.name !== undefined ? '/name' : '/alias');
  if (Object.hasOwn(configured, name))
    throw new SandboxdError(
      'conflict',
      `template name '${name}' is one of this server's E2B templates (${Object.keys(configured).join(', ')}): choose another name`,
      { name },
    );
  const tags: string[] = [];
  if (tag !== undefined) tags.push(tag);
  (b.tags ?? []).forEach((t, i) => {
    const n = normalizeTag(t, 'body', `/tags/${i}`);
    if (!tags.includes(n)) tags.push(n);
  });
  if (tags.length === 0) tags.push(DEFAULT_TEMPLATE_TAG);
  return { name, tags };
}

// --- the step compiler --------------------------------------------------------------------

/** Where the build starts: an image ref for the plan, and the E2B user it starts as (if known). */
interface Base {
  ref: string;
  /** The E2B template's default user (`user` for `base`): steps run as it. */
  user?: string;
  text: string;
  /** An account template the base is: checked to exist before the build starts. */
  template?: { name: string; tag: string };
}

export interface CompiledTemplate {
  plan: BuildPlan;
  /** `force` of the build or of any step: every step runs (see docs/e2b.md). */
  noCache: boolean;
  /** Upload hashes the COPY steps need, each once. */
  uploads: string[];
  /** The account template the build starts from, if any (it must exist). */
  baseTemplate?: { name: string; tag: string };
}

/** The home E2B gives a user it names (`user` -> `/home/user`); undefined for a numeric one. */
export function homeOf(user: string): string | undefined {
  const name = user.split(':')[0];
  if (name === 'root' || name === '0') return '/root';
  if (/^[0-9]+$/.test(name)) return undefined;
  return `/home/${name}`;
}

/** A user (or `user:group`) E2B's steps may name: names or numeric ids, nothing a shell could read otherwise. */
const USER = /^([a-z_][a-z0-9_.-]{0,31}\$?|[0-9]{1,10})(:([a-z_][a-z0-9_.-]{0,31}\$?|[0-9]{1,10}))?$/;

/** What an upload hash may be (E2B's SDK sends sha256 hex). */
export const UPLOAD_HASH = /^[A-Za-z0-9]{16,128}$/;

/**
 * E2B's RUN: `/bin/bash -l -c <cmd>` as E2B's builder runs it, or `/bin/sh -c` in an image
 * without bash (busybox).
 */
export function runArgv(cmd: string): string[] {
  return [
    '/bin/sh',
    '-c',
    'if command -v bash >/dev/null 2>&1; then exec bash -l -c "$1"; fi; exec /bin/sh -c "$1"',
    'sh',
    cmd,
  ];
}

/** `s` as one word of a POSIX shell. */
export const shellQuote = (s: string): string => `'${s.replaceAll("'", `'\\''`)}'`;

/**
 * A start or ready command as the runtime runs it (`/bin/sh -c <label>`) that runs it as
 * E2B does: `bash -l -c <cmd>`, or `sh -c` in an image without bash.
 */
export function shellLabel(cmd: string): string {
  return `c=${shellQuote(cmd)}; if command -v bash >/dev/null 2>&1; then exec bash -l -c "$c"; fi; exec /bin/sh -c "$c"`;
}

/**
 * E2B's USER creates a user that is not there (its own base images have `user`), and with
 * a second argument `true` lets it sudo without a password. Run as root with the user as
 * `$1` and `true`/`false` as `$2`: `useradd`, else `adduser` (busybox's flags), else a
 * line in /etc/passwd and /etc/group with the next free id from 1000 and a home.
 */
export const CREATE_USER_SCRIPT = [
  'u=$(echo "$1" | cut -d: -f1)',
  'if ! id -u "$u" >/dev/null 2>&1; then',
  '  if command -v useradd >/dev/null 2>&1; then',
  '    useradd -m -s "$(command -v bash || echo /bin/sh)" "$u"',
  '  elif command -v adduser >/dev/null 2>&1 && adduser -D -g "" "$u" 2>/dev/null; then :',
  '  else',
  "    n=$(awk -F: 'BEGIN{m=999} $3>m && $3<60000 {m=$3} END{print m+1}' /etc/passwd /etc/group)",
  '    echo "$u:x:$n:$n::/home/$u:/bin/sh" >>/etc/passwd',
  '    grep -q "^$u:" /etc/group || echo "$u:x:$n:" >>/etc/group',
  '    mkdir -p "/home/$u" && chown "$n:$n" "/home/$u"',
  '  fi',
  'fi',
  'if [ "$2" = true ]; then',
  '  if [ -d /etc/sudoers.d ]; then echo "$u ALL=(ALL:ALL) NOPASSWD: ALL" >"/etc/sudoers.d/e2b-$u" && chmod 0440 "/etc/sudoers.d/e2b-$u"; fi',
  'fi',
].join('\n');

/** E2B's WORKDIR of a user: `$1` made (by root) if missing and then owned by `$2`. */
export const MAKE_WORKDIR_SCRIPT = 'if [ ! -d "$1" ]; then mkdir -p "$1" && chown "$2" "$1"; fi';

/**
 * The base directory of a COPY source, as E2B's builder takes it: the path up to the last
 * `/` before the first glob character (doublestar's SplitPattern of `src + "/"`); the files
 * the SDK uploaded for it (only those the glob matched) are under that directory in the tar,
 * and what is under it is what lands in the destination. `.` for the tar's root.
 */
export function copyBaseOf(src: string): string {
  const p = src.endsWith('/') ? src : `${src}/`;
  let split = -1;
  for (let i = 0; i < p.length; i++) {
    const c = p[i];
    if (c === '\\') i++;
    else if (c === '/') split = i;
    else if (c === '*' || c === '?' || c === '[' || c === '{') break;
  }
  if (split <= 0) return split === 0 ? '/' : '.';
  const base = posix.normalize(p.slice(0, split).replace(/\\(.)/g, '$1'));
  return base === '' ? '.' : base;
}

/** Reads E2B's build start and the server's E2B templates into the plan sandboxd's builder runs. */
export class TemplateCompiler {
  constructor(private readonly configured: Readonly<Record<string, E2bTemplate>>) {}

  /** The configured E2B template `name` stands for, if any. */
  private configuredTemplate(name: string): E2bTemplate | undefined {
    return Object.hasOwn(this.configured, name) ? this.configured[name] : undefined;
  }

  private baseOf(b: TemplateBuildStart): Base {
    if (b.fromImageRegistry !== undefined && b.fromImageRegistry !== null)
      throw new SandboxdError(
        'unsupported',
        'sandboxd does not support registry credentials for a base image yet (fromImageRegistry: fromImage with credentials, fromAWSRegistry, fromGCPRegistry): use an image the server can pull, or one of its images',
      );
    const image = b.fromImage ?? undefined;
    const template = b.fromTemplate ?? undefined;
    if (image !== undefined && template !== undefined)
      throw invalid('body', '/fromTemplate', 'give fromImage or fromTemplate, not both');
    if (template !== undefined) {
      const t = template.trim();
      const c = this.configuredTemplate(t);
      if (c) return { ref: c.image, user: c.user, text: `FROM template ${t}` };
      const { name, tag } = parseTemplateName(t, 'body', '/fromTemplate');
      const wanted = tag ?? DEFAULT_TEMPLATE_TAG;
      return { ref: templateImage(name, wanted), text: `FROM template ${t}`, template: { name, tag: wanted } };
    }
    if (image === undefined) throw invalid('body', '/fromImage', 'fromImage or fromTemplate is required');
    const ref = image.trim();
    if (ref === '' || [...ref].some((c) => c <= ' ' || c === '\u007f'))
      throw invalid('body', '/fromImage', `fromImage '${image}' is not an image reference`);
    const e2b = E2B_IMAGE_TEMPLATES[ref.replace(/^(docker\.io\/)?/, '').replace(/:latest$/, '')];
    const c = e2b === undefined ? undefined : this.configuredTemplate(e2b);
    if (c) return { ref: c.image, user: c.user, text: `FROM ${ref}` };
    return { ref, text: `FROM ${ref}` };
  }

  /**
   * The plan of E2B's build start: one stage from the base, each step compiled in order
   * (line = the step's index from 1, as E2B numbers them), then the start and ready
   * commands as labels. Throws `validation` naming the step for anything it cannot build,
   * `unsupported` for what sandboxd does not do; nothing runs before this passes.
   */
  compile(b: TemplateBuildStart): CompiledTemplate {
    const base = this.baseOf(b);
    const steps: Step[] = [];
    const uploads: string[] = [];
    let user = base.user ?? '';
    let workdir = base.user !== undefined ? (homeOf(base.user) ?? '') : '';
    const config = (line: number, text: string, set: ConfigStep['set']) =>
      steps.push({ kind: 'config', line, text, set });
    if (base.user !== undefined)
      config(1, `${base.text} (user ${base.user}${workdir ? `, workdir ${workdir}` : ''})`, {
        user: base.user,
        ...(workdir ? { workingDir: workdir } : {}),
      });
    /** A path of a step, absolute: relative ones (and `~`) from the working dir, else the user's home, else `/`. */
    const absolute = (p: string, at: string): string => {
      const home = user ? homeOf(user) : undefined;
      let abs: string;
      if (p === '~' || p.startsWith('~/')) {
        if (!home) throw invalid('body', at, `'${p}': the current user has no home this builder knows`);
        abs = posix.join(home, p.slice(1));
      } else abs = p.startsWith('/') ? p : posix.join(workdir || home || '/', p);
      const n = posix.normalize(abs);
      return p.endsWith('/') && !n.endsWith('/') ? `${n}/` : n;
    };

    const list = b.steps ?? [];
    list.forEach((s, i) => {
      const line = i + 1;
      const at = `/steps/${i}`;
      const args = s.args ?? [];
      const type = s.type.trim().toUpperCase();
      const need = (ok: boolean, message: string) => {
        if (!ok) throw invalid('body', `${at}/args`, `step ${line} (${type}): ${message}`);
      };
      const noNul = () =>
        need(
          args.every((a) => !a.includes('\0')),
          'arguments may not contain NUL',
        );
      switch (type) {
        case 'RUN': {
          need(args.length >= 1 && args.length <= 2, 'RUN takes a command and an optional user');
          noNul();
          const [cmd, as = ''] = args;
          need(cmd.trim() !== '', 'the command is empty');
          need(as === '' || USER.test(as), `'${as}' is not a user name`);
          const text = `RUN ${cmd}`;
          const other = as !== '' && as !== user;
          if (other) config(line, `USER ${as} (for this RUN)`, { user: as });
          steps.push({ kind: 'run', line, text, argv: runArgv(cmd), args: {} });
          if (other) config(line, `USER ${user || "the image's"}`, { user });
          return;
        }
        case 'COPY': {
          need(args.length >= 2 && args.length <= 4, 'COPY takes a source, a destination, an optional owner and mode');
          noNul();
          const [src, dest, owner = '', mode = ''] = args;
          const hash = s.filesHash ?? '';
          if (!UPLOAD_HASH.test(hash))
            throw invalid('body', `${at}/filesHash`, `step ${line} (COPY ${src}): filesHash is missing or malformed`);
          need(src !== '' && !src.startsWith('/'), `source '${src}' must be a path relative to the context`);
          const from = copyBaseOf(src);
          need(from !== '/' && from !== '..' && !from.startsWith('../'), `source '${src}' is outside the context`);
          need(dest.trim() !== '', 'the destination is empty');
          need(owner === '' || USER.test(owner), `owner '${owner}' is not a user (or user:group)`);
          need(mode === '' || /^0?[0-7]{1,4}$/.test(mode), `mode '${mode}' is not an octal mode`);
          const chown = owner || user || undefined;
          steps.push({
            kind: 'copy',
            line,
            text: `COPY ${src} ${dest}`,
            from: { kind: 'upload', hash },
            sources: [from],
            dest: absolute(dest, `${at}/args/1`),
            ...(chown ? { chown } : {}),
            ...(mode ? { chmod: Number.parseInt(mode, 8) } : {}),
          });
          if (!uploads.includes(hash)) uploads.push(hash);
          return;
        }
        case 'ENV': {
          need(args.length >= 2 && args.length % 2 === 0, 'ENV takes pairs of a name and a value');
          noNul();
          const env: Record<string, string> = {};
          for (let k = 0; k < args.length; k += 2) {
            need(/^[^=]{1,256}$/.test(args[k]), `'${args[k]}' is not a variable name`);
            env[args[k]] = args[k + 1];
          }
          config(line, `ENV ${Object.keys(env).join(' ')}`, { env });
          return;
        }
        case 'WORKDIR': {
          need(args.length === 1 && args[0].trim() !== '', 'WORKDIR takes a path');
          noNul();
          const path = absolute(args[0], `${at}/args/0`).replace(/(.)\/$/, '$1');
          const text = `WORKDIR ${args[0]}`;
          // `/` is there already, and so is the user's home (E2B's base, or made by USER):
          // only the config changes (no sandbox runs).
          if (path === '/' || (user !== '' && path === homeOf(user))) config(line, text, { workingDir: path });
          else if (user === '' || user === 'root' || user.startsWith('0:') || user === '0')
            steps.push({ kind: 'workdir', line, text, path });
          else {
            // E2B makes it as the current user (so it is theirs): made here by root if missing,
            // then handed to the user, in one sandbox.
            config(line, `USER root (to make ${path})`, { user: 'root' });
            steps.push({
              kind: 'run',
              line,
              text,
              argv: ['/bin/sh', '-c', MAKE_WORKDIR_SCRIPT, 'sh', path, user],
              args: {},
            });
            config(line, `${text} (as ${user})`, { user, workingDir: path });
          }
          workdir = path;
          return;
        }
        case 'USER': {
          need(args.length >= 1 && args.length <= 2, 'USER takes a user and an optional sudo flag');
          const [u, sudo = 'false'] = args;
          need(USER.test(u), `'${u}' is not a user name`);
          need(sudo === 'true' || sudo === 'false', `the sudo flag is 'true' or 'false', not '${sudo}'`);
          const name = u.split(':')[0];
          if ((name !== 'root' && !/^[0-9]+$/.test(name)) || sudo === 'true') {
            // Made (if missing) by root, as E2B's builder does, then the steps after run as it.
            config(line, `USER root (to create ${name})`, { user: 'root' });
            steps.push({
              kind: 'run',
              line,
              text: `USER ${u}`,
              argv: ['/bin/sh', '-c', CREATE_USER_SCRIPT, 'sh', u, sudo],
              args: {},
            });
          }
          config(line, `USER ${u}`, { user: u });
          user = u;
          return;
        }
        default:
          throw invalid(
            'body',
            `${at}/type`,
            `step ${line}: E2B step type '${s.type}' is not supported (RUN, COPY, ENV, WORKDIR, USER)`,
          );
      }
    });

    const startCmd = b.startCmd ?? undefined;
    const readyCmd = b.readyCmd ?? undefined;
    if (startCmd !== undefined || readyCmd !== undefined) {
      if ((startCmd ?? '').includes('\0') || (readyCmd ?? '').includes('\0'))
        throw invalid('body', '/startCmd', 'the start and ready commands may not contain NUL');
      const labels: Record<string, string> = {};
      if (startCmd !== undefined && startCmd.trim() !== '') labels[START_CMD_LABEL] = shellLabel(startCmd);
      if (readyCmd !== undefined && readyCmd.trim() !== '') labels[READY_CMD_LABEL] = shellLabel(readyCmd);
      if (Object.keys(labels).length)
        config(Math.max(1, list.length), `START ${startCmd ?? ''}${readyCmd ? ` (ready: ${readyCmd})` : ''}`, {
          labels,
        });
    }
    return {
      plan: { stages: [{ line: 1, base: { kind: 'image', ref: base.ref }, steps }], target: 0 },
      noCache: b.force === true || list.some((s) => s.force === true),
      uploads,
      ...(base.template ? { baseTemplate: base.template } : {}),
    };
  }
}

// --- build status -------------------------------------------------------------------------

/** E2B's build states. */
export type E2bBuildStatus = 'building' | 'waiting' | 'ready' | 'error';

/** sandboxd's state as E2B's: queued is waiting, cancelled is an error. */
export function e2bStatusOf(b: Pick<BuildRecord, 'state'>): E2bBuildStatus {
  switch (b.state) {
    case 'queued':
      return 'waiting';
    case 'building':
      return 'building';
    case 'ready':
      return 'ready';
    default:
      return 'error';
  }
}

export interface E2bLogEntry {
  timestamp: string;
  level: 'debug' | 'info' | 'warn' | 'error';
  message: string;
}

/** A log line as E2B's entry: the builder's own lines and the steps' output are `info`, as E2B's builder logs them. */
export function e2bLogEntryOf(e: Extract<BuildLogEvent, { type: 'log' }>): E2bLogEntry {
  return { timestamp: e.time, level: 'info', message: e.text.replace(/\n$/, '') };
}

/**
 * Why a build is `error`, as E2B's `reason`: the message, and the failing step as E2B
 * numbers it (`base` for the base image, else the step's index from 1), with the end of
 * its output as entries. Undefined unless the build ended in error or was cancelled.
 */
export function e2bReasonOf(
  b: Pick<BuildRecord, 'state' | 'error' | 'finishedAt'>,
): { message: string; step?: string; logEntries: E2bLogEntry[] } | undefined {
  if (b.state === 'cancelled') return { message: b.error?.message ?? 'The build was cancelled', logEntries: [] };
  if (b.state !== 'error') return undefined;
  const e = b.error;
  const d = (e?.details ?? {}) as { line?: unknown; instruction?: unknown; output?: unknown };
  const time = new Date(b.finishedAt ?? Date.now()).toISOString();
  const step =
    typeof d.instruction === 'string' && /^FROM\b/i.test(d.instruction)
      ? 'base'
      : typeof d.line === 'number' && Number.isInteger(d.line) && d.line >= 1
        ? String(d.line)
        : undefined;
  const output = typeof d.output === 'string' ? d.output.split('\n').filter((l) => l !== '') : [];
  // sandboxd's message numbers the plan's steps, with the line: E2B's step is the line.
  const message = (e?.message ?? 'The build failed').replace(/^Step \d+ \(line (\d+)\)/, 'Step $1');
  return {
    message,
    ...(step !== undefined ? { step } : {}),
    logEntries: output.map((message) => ({ timestamp: time, level: 'error' as const, message })),
  };
}

/** E2B's `TemplateTag` of a template row. */
export const e2bTagOf = (t: TemplateRecord) => ({
  tag: t.tag,
  buildID: t.buildId,
  createdAt: new Date(t.createdAt).toISOString(),
});
