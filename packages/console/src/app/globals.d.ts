/** The content of examples/hello.mjs, put in by the bundler. */
declare const __HELLO_MJS__: string;
/** The content of examples/hello.py, put in by the bundler. */
declare const __HELLO_PY__: string;
