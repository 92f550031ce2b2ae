import { Type, type Static } from 'typebox';
import { DateTime } from './common.js';
import { UserName } from './exec.js';

/** Longest path accepted, in UTF-8 bytes (Linux's PATH_MAX). */
export const MAX_PATH_BYTES = 4096;

/** An absolute path inside the sandbox. */
export const SandboxPath = Type.String({
  minLength: 1,
  description: `Absolute (starts with /), at most ${MAX_PATH_BYTES} bytes in UTF-8, no NUL byte.`,
});

/** A file, directory or link inside a sandbox, described without following a symlink. */
export const FileEntrySchema = Type.Object(
  {
    name: Type.String(),
    path: Type.String(),
    type: Type.Union([Type.Literal('file'), Type.Literal('dir'), Type.Literal('symlink'), Type.Literal('other')]),
    size: Type.Integer({ minimum: 0 }),
    mode: Type.Integer({ minimum: 0, maximum: 0o7777, description: 'Permission bits as a number (0o644 = 420).' }),
    owner: Type.String({ description: "User name from the sandbox's /etc/passwd, else the numeric uid." }),
    group: Type.String({ description: "Group name from the sandbox's /etc/group, else the numeric gid." }),
    modifiedAt: DateTime,
    symlinkTarget: Type.Optional(Type.String()),
  },
  { title: 'FileEntry', additionalProperties: false },
);
export type FileEntry = Static<typeof FileEntrySchema>;

export const FileEntryReplySchema = Type.Object(
  { entry: FileEntrySchema },
  { title: 'FileEntryReply', additionalProperties: false },
);

export const FileListSchema = Type.Object(
  {
    entries: Type.Array(FileEntrySchema),
    truncated: Type.Optional(Type.Boolean({ description: 'More than 10,000 entries: the rest were left out.' })),
  },
  { title: 'FileList', additionalProperties: false },
);

const PathQueryFields = {
  path: SandboxPath,
  user: Type.Optional(UserName),
};

/** `?path=&user=` */
export const FilePathQuerySchema = Type.Object(PathQueryFields, { additionalProperties: false });

/** `GET .../files?path=&depth=&user=` */
export const FileListQuerySchema = Type.Object(
  { ...PathQueryFields, depth: Type.Optional(Type.Integer({ minimum: 1, maximum: 10, default: 1 })) },
  { additionalProperties: false },
);

/** `PUT .../files/content?path=&mode=&user=` */
export const FileUploadQuerySchema = Type.Object(
  {
    ...PathQueryFields,
    mode: Type.Optional(
      Type.String({ pattern: '^0?[0-7]{3,4}$', description: 'Octal, e.g. `0644`; default: kept, else 0644.' }),
    ),
  },
  { additionalProperties: false },
);

/** `GET .../files/watch?path=&recursive=&user=` */
export const FileWatchQuerySchema = Type.Object(
  { ...PathQueryFields, recursive: Type.Optional(Type.Boolean({ default: false })) },
  { additionalProperties: false },
);

export const MkdirRequestSchema = Type.Object(
  { path: SandboxPath },
  { title: 'MkdirRequest', additionalProperties: false },
);
export const MoveRequestSchema = Type.Object(
  { from: SandboxPath, to: SandboxPath },
  { title: 'MoveRequest', additionalProperties: false },
);

/** One message of a files watch WebSocket. */
export interface FileEvent {
  type: 'create' | 'write' | 'remove' | 'rename' | 'chmod';
  path: string;
  entry?: FileEntry;
}
