/** The image store of the local runtime driver. See store.ts. */
export { ImageStore, LOCAL_IMAGES } from './store.js';
export { ensureDefaultImages } from './defaults.js';
export type { ImageStoreOptions, StoredImage, LocalImageRef, OnProgress, Progress } from './store.js';
export { parseRef, type ImageRef } from './ref.js';
export { writeOciImage, type WriteImageOptions, type ImageConfigInput } from './oci-write.js';
export { buildBusyboxLayout } from './build-busybox.js';
export { buildDebianLayout } from './build-debian.js';
