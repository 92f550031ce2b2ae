/** Sandboxes whose ports need credentials through the port proxy; existing rows stay public. */
export const sql = `
ALTER TABLE sandboxes ADD COLUMN ports_public INTEGER NOT NULL DEFAULT 1 CHECK (ports_public IN (0, 1));
`;
