/**
 * The tools that run things in a sandbox: run_command (a shell command, waited for or in
 * the background) and run_code (a cell in the code interpreter's stateful kernel).
 */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { Execution } from '@sandboxd/sdk';
import { z } from 'zod';
import type { ToolContext } from './context.js';
import { cut, guarded, ok, stripAnsi } from './results.js';
import { sandboxId } from './sandbox-tools.js';

/** The API's per-stream cap on a waited command's output (1 MiB), past which it sets `truncated`. */
const API_OUTPUT_CAP = '1 MiB';

/** Registers run_command and run_code on `server`. */
export function registerRunTools(server: McpServer, ctx: ToolContext): void {
  const max = ctx.limits.outputChars;
  server.registerTool(
    'run_command',
    {
      title: 'Run a shell command',
      description: [
        'Runs a shell command (/bin/sh -c, so pipes, redirections, && and $VARS work) in a sandbox and waits for it; returns its stdout, stderr and exit code.',
        'Use it to install packages, run programs and tests, inspect the system. A non-zero exit code is a normal result, not an error; 124 means the command hit timeout_ms and was killed.',
        `Each of stdout and stderr is cut to about ${max} characters (the start and the end are kept, with a note); to see all of a long output, redirect it to a file and read it with read_file.`,
        'background: true starts a long-running process (a web server, a watcher) and returns its pid at once; its output is not collected, so redirect it to a file (e.g. "python3 -m http.server 8000 > /tmp/server.log 2>&1").',
      ].join(' '),
      inputSchema: {
        sandbox_id: sandboxId,
        command: z.string().min(1).describe('The shell command line, e.g. "ls -la /work && python3 --version".'),
        cwd: z.string().optional().describe('Absolute working directory (default: the image working directory).'),
        env: z.record(z.string(), z.string()).optional().describe('Extra environment variables for this command only.'),
        timeout_ms: z
          .number()
          .int()
          .min(1)
          .optional()
          .describe(
            'Kill the command after this many milliseconds (default 60000; at most 3600000). Not for background.',
          ),
        user: z
          .string()
          .optional()
          .describe('Run as this user: "root", a uid or a user name (default: the image user).'),
        background: z
          .boolean()
          .optional()
          .describe('Start the command and return at once with its pid, leaving it running (default false).'),
      },
      annotations: { title: 'Run a shell command', readOnlyHint: false, destructiveHint: true, openWorldHint: true },
    },
    (args, extra) =>
      guarded(async () => {
        const sb = await ctx.client.sandboxes.get(args.sandbox_id);
        const opts = {
          cwd: args.cwd,
          env: args.env,
          user: args.user,
          timeoutMs: args.timeout_ms,
          signal: extra.signal,
        };
        if (args.background) {
          const h = await sb.exec(args.command, { ...opts, background: true, tag: 'mcp' });
          return ok(
            `Started in the background with pid ${h.pid}; it keeps running until it exits, is killed (run_command "kill ${h.pid}") or the sandbox stops. Its output is not collected: redirect it to a file to read it later.`,
            { pid: h.pid, background: true },
          );
        }
        const r = await sb.exec(args.command, opts);
        const out = cut(r.stdout, max);
        const err = cut(r.stderr, max);
        const notes: string[] = [];
        if (r.exitCode === 124) notes.push(`The command was killed at its timeout (${args.timeout_ms ?? 60_000} ms).`);
        if (out.omitted || err.omitted)
          notes.push(
            `Output was cut for length (${[out.omitted && `${out.omitted} characters of stdout`, err.omitted && `${err.omitted} characters of stderr`].filter(Boolean).join(', ')} not shown); redirect it to a file and use read_file to see it all.`,
          );
        if (r.truncated)
          notes.push(`The API kept only the first ${API_OUTPUT_CAP} of a stream; the rest was never collected.`);
        const text = [
          `exit code ${r.exitCode}`,
          `--- stdout ---\n${out.text}`,
          ...(r.stderr ? [`--- stderr ---\n${err.text}`] : []),
          ...notes,
        ].join('\n');
        return ok(text, {
          exitCode: r.exitCode,
          stdout: out.text,
          stderr: err.text,
          truncated: Boolean(out.omitted || err.omitted || r.truncated),
        });
      }),
  );

  server.registerTool(
    'run_code',
    {
      title: 'Run code in a notebook kernel',
      description: [
        `Runs code in a stateful Jupyter-style kernel of a sandbox made from "${ctx.codeImage}" (create it with create_sandbox and that image first). Variables, imports and files persist between calls, like notebook cells.`,
        'Languages: python (default; pandas, numpy, matplotlib and more installed), javascript, typescript, bash, r.',
        'Returns what the cell printed (stdout, stderr), the value of its last expression, any error with its traceback, and charts (matplotlib figures) as images.',
        'An exception in the code is reported in the result (fix the code and run it again); the call itself fails only when the sandbox cannot run code (kind "no_code_interpreter": wrong image).',
      ].join(' '),
      inputSchema: {
        sandbox_id: sandboxId,
        code: z.string().min(1).describe('The code of the cell.'),
        language: z
          .enum(['python', 'javascript', 'typescript', 'bash', 'r'])
          .optional()
          .describe('Kernel language (default python). Each language has its own kernel and state.'),
        timeout_ms: z
          .number()
          .int()
          .min(1)
          .optional()
          .describe('Interrupt the cell after this many milliseconds (default 300000).'),
      },
      annotations: { title: 'Run code', readOnlyHint: false, destructiveHint: true, openWorldHint: true },
    },
    (args, extra) =>
      guarded(async () => {
        const sb = await ctx.client.sandboxes.get(args.sandbox_id);
        // What the run gives is collected here as it streams, and the run is stopped once it
        // passes limits.codeCollectChars: a cell printing without end must not fill the
        // memory of the process serving MCP (the server, for /mcp) before its timeout.
        const seen = new Execution();
        const bound = ctx.limits.codeCollectChars;
        let collected = 0;
        const stop = new AbortController();
        const count = (n: number) => {
          collected += n;
          if (collected > bound && !stop.signal.aborted) stop.abort(new Error('output bound'));
        };
        try {
          const ex = await sb.runCode(args.code, {
            language: args.language,
            timeoutMs: args.timeout_ms,
            signal: AbortSignal.any([extra.signal, stop.signal]),
            onStdout: (t) => {
              seen.logs.stdout.push(t);
              count(t.length);
            },
            onStderr: (t) => {
              seen.logs.stderr.push(t);
              count(t.length);
            },
            onResult: (r) => {
              seen.results.push(r);
              count(JSON.stringify(r).length);
            },
          });
          return executionResult(ex, ctx);
        } catch (e) {
          if (!stop.signal.aborted || extra.signal.aborted) throw e;
          const r = executionResult(seen, ctx);
          const note = `The run was stopped: it gave more than ${bound} characters of output; what came first is above (cut). Write large output to a file and read it with read_file.`;
          r.content[0] = { type: 'text', text: `${(r.content[0] as { text: string }).text}\n${note}` };
          return { ...r, structuredContent: { ...r.structuredContent, stopped: true } };
        }
      }),
  );
}

/** An execution as text (logs, results, error) plus its images. */
function executionResult(ex: Execution, ctx: ToolContext): CallToolResult {
  const max = ctx.limits.outputChars;
  const parts: string[] = [];
  const stdout = cut(ex.logs.stdout.join(''), max);
  const stderr = cut(ex.logs.stderr.join(''), max);
  if (stdout.text) parts.push(`--- stdout ---\n${stdout.text}`);
  if (stderr.text) parts.push(`--- stderr ---\n${stderr.text}`);
  const images: CallToolResult['content'] = [];
  const skipped: string[] = [];
  const results = ex.results.map((r, i) => {
    const label = r.isMainResult ? 'result' : `display ${i + 1}`;
    if (r.text !== undefined) parts.push(`--- ${label} ---\n${cut(r.text, max).text}`);
    for (const [fmt, mimeType] of [
      ['png', 'image/png'],
      ['jpeg', 'image/jpeg'],
    ] as const) {
      const data = r[fmt];
      if (!data) continue;
      if (images.length >= ctx.limits.images || data.length > ctx.limits.imageChars) skipped.push(`${label} (${fmt})`);
      else images.push({ type: 'image', data, mimeType });
    }
    const other = r.formats().filter((f) => f !== 'text' && f !== 'png' && f !== 'jpeg');
    if (other.length) parts.push(`(${label} also has: ${other.join(', ')})`);
    return { isMainResult: r.isMainResult, text: r.text, formats: r.formats() };
  });
  if (skipped.length)
    parts.push(
      `Images not returned (more than ${ctx.limits.images} or over the size bound): ${skipped.join(', ')}; save them to a file instead.`,
    );
  const error = ex.error
    ? { name: ex.error.name, value: ex.error.value, traceback: cut(stripAnsi(ex.error.traceback), max).text }
    : undefined;
  if (error) parts.push(`--- error: ${error.name}: ${error.value} ---\n${error.traceback}`);
  if (stdout.omitted || stderr.omitted) parts.push('Output was cut for length; write it to a file and use read_file.');
  if (!parts.length) parts.push('The cell ran and gave no output.');
  const head = error ? `The code raised ${error.name}.` : 'The code ran.';
  return {
    content: [{ type: 'text', text: `${head}\n${parts.join('\n')}` }, ...images],
    structuredContent: {
      stdout: stdout.text,
      stderr: stderr.text,
      results,
      ...(error ? { error } : {}),
      executionCount: ex.executionCount,
      images: images.length,
    },
  };
}
