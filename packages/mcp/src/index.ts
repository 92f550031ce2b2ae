/**
 * `@sandboxd/mcp`: sandboxd's Model Context Protocol server (tools over the sandboxd SDK),
 * served over stdio by `sbx mcp` and over streamable HTTP at `/mcp` by the server.
 */
export { createMcpServer, MCP_SERVER_NAME, MCP_SERVER_VERSION, type McpServerOptions } from './server.js';
export { handleMcpPost, type McpHttpExchange } from './http.js';
export { serveStdio } from './stdio.js';
export { MCP_MARKER, SANDBOX_ID_RE } from './sandbox-tools.js';
export { sandboxUri } from './resources.js';
export { DEFAULT_LIMITS, type McpLimits } from './results.js';
