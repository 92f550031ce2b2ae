/**
 * A sandbox's network settings (`{egress}`, JSON), as created or last changed; NULL for
 * sandboxes made before egress rules existed. Numbered 8: 7 is another change's.
 */
export const sql = `
ALTER TABLE sandboxes ADD COLUMN network_json TEXT;
`;
