/**
 * `@sandboxd/mcp`: sandboxd's Model Context Protocol server (tools over the sandboxd SDK),
 * served over stdio by `sbx mcp` and over streamable HTTP at `/mcp` by the server.
 * (Being built in issue 37; the tools land with their tests.)
 */
export {};
