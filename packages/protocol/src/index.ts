export * from './errors.js';
export * from './common.js';
export * from './sandbox.js';
export * from './exec.js';
export * from './terminal.js';
export * from './events.js';
export * from './account.js';
export * from './auth.js';
