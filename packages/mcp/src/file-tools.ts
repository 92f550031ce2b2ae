/**
 * The file tools: read_file (bounded, by byte offset), write_file (text or base64) and
 * list_directory.
 */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { type FileEntry, RangeNotSatisfiableError } from '@sandboxd/sdk';
import { z } from 'zod';
import type { ToolContext } from './context.js';
import { guarded, ok } from './results.js';
import { sandboxId } from './sandbox-tools.js';

const absolutePath = (what: string) =>
  z.string().min(1).max(4096).describe(`Absolute path of the ${what}, e.g. "/work/main.py".`);

/** Magic numbers of the images read_file returns as MCP image content. */
const IMAGE_MAGIC: Array<[string, number[]]> = [
  ['image/png', [0x89, 0x50, 0x4e, 0x47]],
  ['image/jpeg', [0xff, 0xd8, 0xff]],
  ['image/gif', [0x47, 0x49, 0x46, 0x38]],
];

function imageType(b: Uint8Array): string | undefined {
  return IMAGE_MAGIC.find(([, m]) => m.every((v, i) => b[i] === v))?.[0];
}

/** The bytes as text when they are UTF-8 without NULs, else undefined (binary). */
function asText(b: Uint8Array, cutAtEnd: boolean): string | undefined {
  if (b.includes(0)) return undefined;
  // A range may end inside a character: up to 3 bytes at the end are left to the next read.
  for (let drop = 0; drop <= (cutAtEnd ? 3 : 0); drop++) {
    try {
      return new TextDecoder('utf-8', { fatal: true }).decode(b.subarray(0, b.length - drop));
    } catch {
      /* try one byte less */
    }
  }
  return undefined;
}

function mode(n: number): string {
  return n.toString(8).padStart(4, '0');
}

function entryLine(e: FileEntry): string {
  const kind = e.type === 'dir' ? 'd' : e.type === 'symlink' ? 'l' : e.type === 'file' ? '-' : '?';
  const target = e.symlinkTarget ? ` -> ${e.symlinkTarget}` : '';
  return `${kind} ${mode(e.mode)} ${e.owner.padEnd(8)} ${String(e.size).padStart(10)} ${e.modifiedAt} ${e.path}${e.type === 'dir' ? '/' : ''}${target}`;
}

/** Registers read_file, write_file and list_directory on `server`. */
export function registerFileTools(server: McpServer, ctx: ToolContext): void {
  const maxBytes = ctx.limits.fileBytes;
  server.registerTool(
    'read_file',
    {
      title: 'Read a file',
      description: [
        `Reads a file of a sandbox. Text (UTF-8) comes back as text; PNG, JPEG and GIF images as images; other binary files as base64.`,
        `At most ${maxBytes} bytes per call: for a longer file the result says which bytes it holds and the offset to pass to read the next part.`,
        'Fails with kind "not_found" for a missing file, "validation" for a directory (use list_directory) or a relative path.',
      ].join(' '),
      inputSchema: {
        sandbox_id: sandboxId,
        path: absolutePath('file'),
        offset: z.number().int().min(0).optional().describe('Byte offset to start at (default 0).'),
        length: z.number().int().min(1).optional().describe(`Most bytes to return (default and largest: ${maxBytes}).`),
      },
      annotations: { title: 'Read a file', readOnlyHint: true, openWorldHint: false },
    },
    (args, extra) =>
      guarded(async () => {
        const sb = await ctx.client.sandboxes.get(args.sandbox_id);
        const entry = await sb.files.stat(args.path, { signal: extra.signal });
        const start = args.offset ?? 0;
        const want = Math.min(args.length ?? maxBytes, maxBytes);
        const size = entry.type === 'file' ? entry.size : undefined;
        let bytes: Uint8Array;
        try {
          // One byte past what is wanted tells whether more follows (a symlink's target has no size here).
          bytes = (await sb.files.read(args.path, {
            format: 'bytes',
            range: { start, end: start + want },
            signal: extra.signal,
          })) as Uint8Array;
        } catch (e) {
          if (!(e instanceof RangeNotSatisfiableError)) throw e;
          const empty = start === 0;
          return ok(
            empty
              ? `${args.path} is empty (0 bytes).`
              : `Offset ${start} is past the end of ${args.path}${size !== undefined ? ` (${size} bytes)` : ''}.`,
            {
              path: args.path,
              size: size ?? (empty ? 0 : undefined),
              offset: start,
              bytes: 0,
              content: '',
            },
          );
        }
        const more = bytes.length > want;
        if (more) bytes = bytes.subarray(0, want);
        const total = size !== undefined ? `${size} bytes` : 'size unknown';
        const image = start === 0 && !more ? imageType(bytes) : undefined;
        if (image) {
          const data = Buffer.from(bytes).toString('base64');
          return {
            content: [
              { type: 'text', text: `${args.path}: ${image}, ${bytes.length} bytes.` },
              { type: 'image', data, mimeType: image },
            ],
            structuredContent: { path: args.path, size: bytes.length, mimeType: image, encoding: 'base64' },
          };
        }
        let text = asText(bytes, more);
        const encoding = text === undefined ? 'base64' : 'utf8';
        let shown = bytes.length;
        if (text === undefined) text = Buffer.from(bytes).toString('base64');
        else shown = Buffer.byteLength(text);
        const end = start + shown;
        const next = more || shown < bytes.length;
        const head =
          start === 0 && !next
            ? `${args.path} (${total}${encoding === 'base64' ? ', binary: base64 below' : ''}):`
            : `${args.path}: bytes ${start}-${end - 1} of ${total}${encoding === 'base64' ? ' (binary: base64 below)' : ''}.${next ? ` More follows: read_file with offset ${end}.` : ''}`;
        return ok(`${head}\n${text}`, {
          path: args.path,
          size,
          offset: start,
          bytes: shown,
          encoding,
          content: text,
          ...(next ? { nextOffset: end } : {}),
        });
      }),
  );

  server.registerTool(
    'write_file',
    {
      title: 'Write a file',
      description: [
        'Creates or replaces a file in a sandbox with the given content (parent directories are made as needed); the old content is replaced whole.',
        'Use it to put source code, data or config into the sandbox before running it. encoding "base64" writes binary content.',
        `Content is at most ${ctx.limits.writeChars} characters per call.`,
      ].join(' '),
      inputSchema: {
        sandbox_id: sandboxId,
        path: absolutePath('file'),
        content: z.string().max(ctx.limits.writeChars).describe('The whole new content of the file.'),
        encoding: z
          .enum(['utf8', 'base64'])
          .optional()
          .describe('"utf8" (default): content is the text; "base64": content is base64 of the bytes.'),
        mode: z
          .string()
          .regex(/^0?[0-7]{3,4}$/)
          .optional()
          .describe('Permission bits in octal, e.g. "755" for a script (default 644 for a new file).'),
      },
      annotations: { title: 'Write a file', readOnlyHint: false, destructiveHint: true, idempotentHint: true },
    },
    (args, extra) =>
      guarded(async () => {
        const sb = await ctx.client.sandboxes.get(args.sandbox_id);
        const data = args.encoding === 'base64' ? new Uint8Array(Buffer.from(args.content, 'base64')) : args.content;
        const dir = args.path.replace(/\/[^/]*$/, '') || '/';
        if (dir !== '/' && !(await sb.files.exists(dir))) await sb.files.mkdir(dir);
        const entry = await sb.files.write(args.path, data, {
          mode: args.mode === undefined ? undefined : args.mode,
          signal: extra.signal,
        });
        return ok(`Wrote ${entry.size} bytes to ${entry.path} (mode ${mode(entry.mode)}).`, {
          path: entry.path,
          size: entry.size,
          mode: mode(entry.mode),
        });
      }),
  );

  server.registerTool(
    'list_directory',
    {
      title: 'List a directory',
      description: `Lists a directory of a sandbox: one line per entry with type (d directory, - file, l symlink), permissions, owner, size in bytes, modification time and path. depth > 1 also lists subdirectories (at most ${ctx.limits.listEntries} entries are shown). Fails with kind "not_found" for a missing path, "validation" for a file.`,
      inputSchema: {
        sandbox_id: sandboxId,
        path: absolutePath('directory').default('/'),
        depth: z
          .number()
          .int()
          .min(1)
          .max(10)
          .optional()
          .describe('How deep to list (default 1: the directory itself).'),
      },
      annotations: { title: 'List a directory', readOnlyHint: true, openWorldHint: false },
    },
    (args, extra) =>
      guarded(async () => {
        const sb = await ctx.client.sandboxes.get(args.sandbox_id);
        const list = await sb.files.list(args.path, { depth: args.depth, signal: extra.signal });
        const shown = list.slice(0, ctx.limits.listEntries);
        const more =
          list.length > shown.length || list.truncated
            ? `\n(${list.truncated ? 'more than' : ''} ${list.length} entries; only the first ${shown.length} are shown: list a subdirectory or a smaller depth)`
            : '';
        return ok(
          shown.length ? `${args.path}:\n${shown.map(entryLine).join('\n')}${more}` : `${args.path} is empty.`,
          {
            path: args.path,
            entries: shown.map((e) => ({
              name: e.name,
              path: e.path,
              type: e.type,
              size: e.size,
              mode: mode(e.mode),
              modifiedAt: e.modifiedAt,
              ...(e.symlinkTarget ? { symlinkTarget: e.symlinkTarget } : {}),
            })),
            truncated: Boolean(more),
          },
        );
      }),
  );
}
