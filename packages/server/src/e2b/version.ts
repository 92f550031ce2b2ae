/**
 * The envd version sandboxd reports to E2B's SDKs. The SDKs gate features on it, so it is
 * the highest version whose features sandboxd really serves: stdin for commands (0.3.0),
 * a default user when a call names none (0.4.0), closing stdin (0.5.2), octet-stream
 * (and gzip) uploads (0.5.7), file metadata (0.6.2: `X-Metadata-*` on uploads, kept as
 * `user.e2b.*` extended attributes, `metadata` in entries) and entries in watch events
 * (0.6.3). Network-mount watches (0.6.4, `allowNetworkMounts`) are not served, so the SDK
 * refuses them itself with its own "update the template" error instead of sending calls
 * whose flag would be ignored.
 */
export const ENVD_VERSION = '0.6.3';

/** The port E2B's SDKs address envd on (`49983-<id>.<domain>`, `E2b-Sandbox-Port`). */
export const ENVD_PORT = 49983;
