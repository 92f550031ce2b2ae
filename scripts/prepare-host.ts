/**
 * Second half of set-up, in TypeScript: compiles the native helpers, builds the SDK package
 * (packages/sdk/dist, what plain `node` and the server's /sdk/sandboxd-sdk.tgz use) and the
 * default images (local/debian:bookworm, local/busybox:latest, local/code-interpreter:latest)
 * when missing or outdated.
 * Flags: --image-dir DIR (default $SANDBOXD_IMAGE_DIR or ./data/images), --no-images.
 */
import { readdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { ensureSdkDist } from '@sandboxd/sdk/build';
import { NATIVE_SRC_DIR, nativeBin } from '../packages/server/src/runtime/local/native.js';
import { ImageStore } from '../packages/server/src/runtime/local/images/store.js';
import { ensureDefaultImages } from '../packages/server/src/runtime/local/images/defaults.js';

const args = process.argv.slice(2);
const flag = (name: string) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};

for (const f of readdirSync(NATIVE_SRC_DIR).filter((n) => n.endsWith('.c'))) nativeBin(f.slice(0, -2));
await ensureSdkDist({ log: (msg) => console.log(`sandboxd set-up: SDK ${msg}`) });

if (!args.includes('--no-images')) {
  const dir = resolve(
    flag('--image-dir') ?? process.env.SANDBOXD_IMAGE_DIR ?? resolve(process.env.SANDBOXD_DATA_DIR ?? 'data', 'images'),
  );
  await ensureDefaultImages(new ImageStore({ dir }), (msg: string) => console.log(`sandboxd set-up: ${msg}`));
}
