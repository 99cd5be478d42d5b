// The Pyodide backend's child process (sandbox_kernel/repl/pyodide.py starts it under Node's
// permission model). Its main thread only keeps the interrupt buffer: Pyodide runs in a worker
// (worker.mjs), so a SIGINT from the parent (the soft cancel) lands here while a cell runs and
// becomes KeyboardInterrupt at the cell's next bytecode. The worker speaks the native
// backend's JSON-RPC protocol (native/child.py) on the two descriptors named below.
//
//   node host.mjs INDEX_URL CHILD_PY DRIVER_PY WORKSPACE MOUNT REQUESTS_FD REPLIES_FD
import { writeSync } from "node:fs";
import { Worker } from "node:worker_threads";

const [indexURL, childPath, driverPath, workspace, mount, requestsFd, repliesFd, parts] =
  process.argv.slice(2);
const interrupt = new Int32Array(new SharedArrayBuffer(4));
const SIGINT = 2;

const worker = new Worker(new URL("./worker.mjs", import.meta.url), {
  workerData: {
    indexURL, childPath, driverPath, workspace, mount, driverParts: parts.split(","),
    requestsFd: Number(requestsFd), repliesFd: Number(repliesFd), interrupt,
  },
});
process.on("SIGINT", () => Atomics.store(interrupt, 0, SIGINT));
worker.on("error", (error) => {
  writeSync(2, `pyodide: ${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
});
worker.on("exit", (code) => process.exit(code));
