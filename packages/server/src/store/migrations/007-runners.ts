/**
 * Where each sandbox and volume lives when the API's sandboxes run on runners
 * (`SANDBOXD_ROLE=api`): the runner's node name (`SANDBOXD_NODE_NAME`), written before the
 * runner is asked to create the sandbox (and, for a volume, with the first sandbox placed
 * with it). NULL: none recorded (role `all`, records from before this migration, a create
 * not placed yet).
 */
export const sql = `
ALTER TABLE sandboxes ADD COLUMN runner TEXT;
ALTER TABLE volumes ADD COLUMN runner TEXT;
`;
