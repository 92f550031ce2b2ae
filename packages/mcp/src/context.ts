import type { SandboxdClient } from '@sandboxd/sdk';
import type { McpLimits } from './results.js';

/** What every tool's handler uses. */
export interface ToolContext {
  /** The SDK client acting as the caller (its API key decides what the tools may touch). */
  client: SandboxdClient;
  /** The image create_sandbox uses when none is given. */
  defaultImage: string;
  /** The image run_code's hints name. */
  codeImage: string;
  limits: McpLimits;
  /** Tells the client that the resource list (sandboxes made through MCP) changed. */
  onSandboxesChanged(): void;
}
