/**
 * What E2B's front door records of a sandbox: the template name it was created from (the
 * envd door finds the template's default user by it) and the caller's metadata labels
 * (JSON object of strings). Both NULL for sandboxes created through sandboxd's own API.
 */
export const sql = `
ALTER TABLE sandboxes ADD COLUMN template TEXT;
ALTER TABLE sandboxes ADD COLUMN metadata_json TEXT;
`;
