/**
 * Isolation tiers (issue 38): a sandbox's tier (`container`, what every sandbox made before
 * tiers existed was, or `gvisor`), and where a paused one keeps its memory (`ram` or
 * `disk`; NULL unless paused). Numbered 13.
 */
export const sql = `
ALTER TABLE sandboxes ADD COLUMN isolation TEXT NOT NULL DEFAULT 'container' CHECK (isolation IN ('container', 'gvisor'));
ALTER TABLE sandboxes ADD COLUMN paused_memory TEXT CHECK (paused_memory IN ('ram', 'disk'));
`;
