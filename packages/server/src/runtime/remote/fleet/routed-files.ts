import type { DriverFiles } from '../../files.js';

/**
 * {@link DriverFiles} whose every call runs on the files of the runner that holds the
 * sandbox: `on(id, fn)` finds that runner and calls `fn` with its files.
 */
export function routedFiles(on: <T>(id: string, fn: (f: DriverFiles) => Promise<T>) => Promise<T>): DriverFiles {
  return {
    stat: (id, path, o) => on(id, (f) => f.stat(id, path, o)),
    list: (id, path, o) => on(id, (f) => f.list(id, path, o)),
    mkdir: (id, path, o) => on(id, (f) => f.mkdir(id, path, o)),
    move: (id, from, to, o) => on(id, (f) => f.move(id, from, to, o)),
    remove: (id, path, o) => on(id, (f) => f.remove(id, path, o)),
    read: (id, path, o) => on(id, (f) => f.read(id, path, o)),
    write: (id, path, body, o) => on(id, (f) => f.write(id, path, body, o)),
    watch: (id, path, o) => on(id, (f) => f.watch(id, path, o)),
    whoami: (id, o) => on(id, (f) => f.whoami(id, o)),
    unpack: (id, dest, body) => on(id, (f) => f.unpack(id, dest, body)),
    pack: (id, path, o) => on(id, (f) => f.pack(id, path, o)),
  };
}
