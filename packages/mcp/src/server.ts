/**
 * `createMcpServer`: sandboxd's tools and resources as one MCP server over the sandboxd
 * TypeScript SDK. The SDK client given decides who acts: its API key's account, with the
 * API's own authorization, limits and validation.
 */
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { SandboxdClient } from '@sandboxd/sdk';
import type { ToolContext } from './context.js';
import { registerFileTools } from './file-tools.js';
import { registerSandboxResources } from './resources.js';
import { DEFAULT_LIMITS, type McpLimits } from './results.js';
import { registerRunTools } from './run-tools.js';
import { registerSandboxTools } from './sandbox-tools.js';

/** The server's name in the MCP handshake. */
export const MCP_SERVER_NAME = 'sandboxd';
/** The version announced in the handshake (the SDK's and the CLI's). */
export const MCP_SERVER_VERSION = '0.3.0';

/** Options of {@link createMcpServer}; every field has a default. */
export interface McpServerOptions {
  /** The image create_sandbox starts when none is given (default `local/debian:bookworm`). */
  defaultImage?: string;
  /** The code interpreter's image, named in run_code's description (default `local/code-interpreter:latest`). */
  codeImage?: string;
  /** Output bounds (see {@link DEFAULT_LIMITS}). */
  limits?: Partial<McpLimits>;
}

/** Guidance for the model, sent in the handshake's `instructions`. */
const INSTRUCTIONS = [
  'sandboxd runs isolated Linux sandboxes. Typical flow: create_sandbox -> write_file / run_command / run_code -> read_file -> delete_sandbox.',
  'Every tool but create_sandbox and list_sandboxes takes the sandbox_id that create_sandbox returned.',
  'Sandboxes stop on their own at the end of their lifetime (default 10 minutes) and cost while they run: delete them when done, pause them to keep them for later.',
  'run_code needs a sandbox made from local/code-interpreter:latest. Failures come back as tool results with isError and the API error kind (not_found, validation, concurrency, conflict, ...).',
].join(' ');

/**
 * A new MCP server whose tools (create_sandbox, list_sandboxes, run_command, run_code,
 * read_file, write_file, list_directory, get_port_url, pause_sandbox, resume_sandbox,
 * delete_sandbox) and resources (`sandbox://<id>` of the sandboxes made through MCP) act
 * through `client`. Connect it to one transport (stdio, or one streamable HTTP request).
 */
export function createMcpServer(client: SandboxdClient, opts: McpServerOptions = {}): McpServer {
  const server = new McpServer(
    { name: MCP_SERVER_NAME, title: 'sandboxd', version: MCP_SERVER_VERSION },
    { instructions: INSTRUCTIONS },
  );
  const ctx: ToolContext = {
    client,
    defaultImage: opts.defaultImage ?? 'local/debian:bookworm',
    codeImage: opts.codeImage ?? 'local/code-interpreter:latest',
    limits: { ...DEFAULT_LIMITS, ...(opts.limits ?? {}) },
    onSandboxesChanged: () => {
      if (server.isConnected()) server.sendResourceListChanged();
    },
  };
  registerSandboxTools(server, ctx);
  registerRunTools(server, ctx);
  registerFileTools(server, ctx);
  registerSandboxResources(server, ctx);
  return server;
}
