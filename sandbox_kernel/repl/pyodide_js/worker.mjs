// Pyodide in a worker thread, serving cells with the native backend's own Python code: the
// channel and turn loop of native_child.py and the cell driver (guest/driver.py), copied into
// Pyodide's file system. The channel reads and writes the parent's pipes with blocking
// fs calls (this thread has nothing else to do); cells' stdout and stderr go to fd 1 and 2.
import { constants, readFileSync, readSync, writeSync } from "node:fs";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import { workerData } from "node:worker_threads";

// driverParts: the driver's part files (repl/protocol.py's DRIVER_PARTS), sent by the host.
const { indexURL, childPath, driverPath, driverParts, workspace, mount, requestsFd, repliesFd,
  interrupt } = workerData;

// Pyodide's NODEFS reads open flags through process.binding("constants"), which Node's
// permission model refuses; this gives it those constants and nothing else.
process.binding = (name) => {
  if (name === "constants") return { fs: constants };
  throw new Error(`process.binding(${JSON.stringify(name)}) is not available`);
};

const { loadPyodide } = await import(pathToFileURL(join(indexURL, "pyodide.mjs")).href);
const pyodide = await loadPyodide({ indexURL, env: { HOME: mount } });
pyodide.setInterruptBuffer(interrupt);
pyodide.setStdout({ write: (bytes) => writeSync(1, bytes) });
pyodide.setStderr({ write: (bytes) => writeSync(2, bytes) });

pyodide.FS.mkdirTree(mount);
pyodide.FS.mount(pyodide.FS.filesystems.NODEFS, { root: workspace }, mount);
const LIB = "/lib/sandbox_kernel_pyodide";
pyodide.FS.mkdirTree(LIB);
pyodide.FS.writeFile(`${LIB}/native_child.py`, readFileSync(childPath));
// The driver and its parts (guest/streams.py, bundles.py, ...), which it loads from its folder.
for (const name of ["driver.py", ...driverParts]) {
  pyodide.FS.writeFile(`${LIB}/${name}`, readFileSync(join(dirname(driverPath), name)));
}

let pending = Buffer.alloc(0);
const chunk = Buffer.alloc(1 << 16);
// One line from the parent (with its newline), or an empty buffer at EOF.
function readLine() {
  for (;;) {
    const end = pending.indexOf(10);
    if (end >= 0) {
      const line = pending.subarray(0, end + 1);
      pending = pending.subarray(end + 1);
      return new Uint8Array(line);
    }
    const count = readSync(requestsFd, chunk, 0, chunk.length, null);
    if (count === 0) {
      const rest = pending;
      pending = Buffer.alloc(0);
      return new Uint8Array(rest);
    }
    pending = Buffer.concat([pending, chunk.subarray(0, count)]);
  }
}
function write(bytes) {
  let view = Buffer.from(bytes);
  while (view.length > 0) view = view.subarray(writeSync(repliesFd, view));
}

// What Pyodide's CDN would serve (numpy, pandas, ...): the npm package has the standard
// library only, so an import of one of these says why it fails instead of "No module named".
const lock = JSON.parse(readFileSync(join(indexURL, "pyodide-lock.json"), "utf8"));
const offline = Object.values(lock.packages || {}).flatMap((entry) => entry.imports || []);

pyodide.globals.set("_sandbox_kernel_offline", offline);
pyodide.globals.set("_sandbox_kernel_read_line", readLine);
pyodide.globals.set("_sandbox_kernel_write", write);
const code = pyodide.runPython(`
import os, sys
sys.path.insert(0, "${LIB}")
os.chdir(${JSON.stringify(mount)})
import native_child
from pyodide.ffi import to_js

class _OfflinePackages:
    """Last on sys.meta_path: an import that found nothing, of a package Pyodide's CDN has."""
    names = frozenset(_sandbox_kernel_offline.to_py())

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in cls.names:
            raise ModuleNotFoundError(
                f"{top} is a Pyodide package served from Pyodide's CDN, which this machine "
                "cannot reach: the pyodide backend has the standard library only",
                name=name,
            )
        return None

sys.meta_path.append(_OfflinePackages)

class _Reader:
    def readline(self):
        return _sandbox_kernel_read_line().to_bytes()

class _Writer:
    def write(self, data):
        _sandbox_kernel_write(to_js(bytes(data)))
    def flush(self):
        pass

native_child.serve_cells(native_child.Channel(_Reader(), _Writer()), "${LIB}/driver.py")
`);
process.exit(code);
