/**
 * The build plan: what both front ends (a Dockerfile, parsed by dockerfile.ts; E2B's
 * template steps, compiled by e2b/templates.ts) turn into, and what the executor
 * (services/builds.ts) runs. Everything here is resolved before anything runs: build args
 * and `$VAR`s substituted, shell forms wrapped in the stage's `SHELL`, stage names turned
 * into indexes. A plan that parses is a plan the executor can run; whatever the builder does
 * not support was refused with the line that says it.
 */

/** The image config a step leaves (the `config` of an OCI image, in sandboxd's terms). */
export interface ImageConfig {
  /** Env of every process (and of RUN steps, with the build args). */
  env: Record<string, string>;
  workingDir: string;
  /** `root`, a name, `uid` or `uid:gid`; empty: the base's (root). */
  user: string;
  entrypoint: string[] | null;
  cmd: string[] | null;
  labels: Record<string, string>;
  /** `80/tcp` form, sorted. */
  exposedPorts: string[];
  /** The shell of shell-form RUN/CMD/ENTRYPOINT: default `["/bin/sh", "-c"]`. */
  shell: string[];
}

/** Where a stage starts from. */
export type StageBase =
  /** An image as the account names it in a create: a pulled or default image, `snapshots/<n>`, `templates/<n>:<t>`, or `scratch`. */
  | { kind: 'image'; ref: string }
  /** An earlier stage of the same plan (`FROM builder`). */
  | { kind: 'stage'; stage: number };

/** Where a COPY takes its files from. */
export type CopySource =
  /** The build context (Dockerfile builds): `sources` are paths or globs, relative to its root. */
  | { kind: 'context' }
  /** The filesystem of an earlier stage's result (`COPY --from=builder`): `sources` are absolute paths. */
  | { kind: 'stage'; stage: number }
  /** An image's filesystem (`COPY --from=alpine:3`): `sources` are absolute paths. */
  | { kind: 'image'; ref: string }
  /** A tar an E2B client uploaded (`GET /templates/{id}/files/{hash}`): `sources` are paths in it. */
  | { kind: 'upload'; hash: string };

interface StepBase {
  /** 1-based line of the Dockerfile (E2B: the step's index, from 1). */
  line: number;
  /** The instruction as written (one line, continuation lines joined), for logs and errors. */
  text: string;
}

/** Runs `argv` in a sandbox of the stage's current layer, as `config.user` in `config.workingDir`. */
export interface RunStep extends StepBase {
  kind: 'run';
  /** Shell form already wrapped: `[...shell, command]`. */
  argv: string[];
  /** Build args in scope (`ARG`), visible to this RUN only, never kept in the image. */
  args: Record<string, string>;
}

/** Copies files into the layer. `dest` is absolute (a relative one was joined to WORKDIR). */
export interface CopyStep extends StepBase {
  kind: 'copy';
  from: CopySource;
  sources: string[];
  /** Ends with `/` when the Dockerfile said so (then it is a directory). */
  dest: string;
  /** `--chown=user[:group]`: the owner of what is copied (names resolved in the layer). */
  chown?: string;
  /** `--chmod=0755`: octal mode of every copied file and directory. */
  chmod?: number;
  /** ADD (local files only: a local tar is extracted like Docker's ADD; URLs are refused at parse time). */
  add?: boolean;
}

/** Makes `path` (absolute) if missing and sets it as the working dir. */
export interface WorkdirStep extends StepBase {
  kind: 'workdir';
  path: string;
}

/** Changes only the config (ENV, USER, LABEL, EXPOSE, CMD, ENTRYPOINT, SHELL): no sandbox runs. */
export interface ConfigStep extends StepBase {
  kind: 'config';
  set: Partial<ImageConfig>;
}

export type Step = RunStep | CopyStep | WorkdirStep | ConfigStep;

export interface Stage {
  /** `AS name`, lowercased; absent for unnamed stages. */
  name?: string;
  /** Line of its FROM. */
  line: number;
  base: StageBase;
  steps: Step[];
}

export interface BuildPlan {
  stages: Stage[];
  /** Index of the stage whose result is the image (the last one). */
  target: number;
}

/** The config a stage starts with before its base's own is known (a base image's config replaces these where it has one). */
export const DEFAULT_SHELL = ['/bin/sh', '-c'];

/**
 * One entry of a copy stream (runtime/copy-stream.ts encodes them for the agent's `file
 * unpack`): what a COPY writes, its path relative to the destination directory (`a/b.txt`,
 * never absolute, never `..`; `''` for the destination directory itself, dirs only), its own
 * mode and owner. Dirs come before what they hold.
 */
export interface CopyEntry {
  path: string;
  type: 'file' | 'dir' | 'symlink';
  /** Permission bits (`& 0o7777`). */
  mode: number;
  uid: number;
  gid: number;
  /** Bytes of a file; 0 otherwise. */
  size: number;
  /** A symlink's target, as stored (never resolved). */
  target?: string;
  /** A file's content: exactly `size` bytes. */
  body?: () => AsyncIterable<Uint8Array>;
}
