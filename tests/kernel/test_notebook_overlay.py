"""The notebook's folder as people use it, by default: cells read the files beside the notebook
and write next to them (np.save, to_csv into a subfolder, sqlite3, savefig, rename, delete,
a 300 MB np.memmap)
as on ipykernel, compared cell by cell with ipykernel run on a copy of the same folder; the
user's own files are never changed, the guest's writes are kept in the layer, and the next
start sees them.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from tests.kernel.conftest import start_ipykernel, start_kernel

CELLS = [
    "import os, sqlite3\nimport numpy as np, pandas as pd\nimport matplotlib\n"
    "matplotlib.use('Agg')\nimport matplotlib.pyplot as plt",
    "sorted(n for n in os.listdir('.')\n"
    "       if not n.startswith('.') and n not in ('workspace', 'policy.toml', 'runs.jsonl'))",
    "df = pd.read_csv('examples/ex1.csv'); print(df)",
    "np.save('some_array', np.arange(4)); np.load('some_array.npy')",
    "df.to_csv('examples/out.csv', index=False); print(open('examples/out.csv').read())",
    "con = sqlite3.connect('mydata.sqlite'); con.execute('create table t (a)')\n"
    "con.execute('insert into t values (7)'); con.commit()\n"
    "con.execute('select a from t').fetchall()",
    "import sqlalchemy as sa\nengine = sa.create_engine('sqlite:///mydata.sqlite')\n"
    "pd.read_sql('select a from t', engine)",
    "os.makedirs('fig', exist_ok=True); plt.plot([1, 2]); plt.savefig('fig/x.png')\n"
    "os.path.getsize('fig/x.png') > 0",
    "open('examples/ex1.csv', 'a').write('9,9,9,9,hello\\n')\nlen(pd.read_csv('examples/ex1.csv'))",
    "os.rename('examples/ex2.csv', 'examples/renamed.csv'); sorted(os.listdir('examples'))",
    "os.remove('notes.txt'); os.path.exists('notes.txt')",
    "!ls examples",
    "!cat examples/renamed.csv",
    "df.to_csv('output/table.csv')\nsorted(n for n in os.listdir('output') if n[0] != '.')",
    # A memmap of a few hundred MB (the guest has no mmap: guest/mmapfile.py reads the file).
    "m = np.memmap('big.dat', mode='w+', dtype='uint8', shape=(300 * 2**20,))\n"
    "m[::4096] = 1; m.flush(); del m\n"
    "r = np.memmap('big.dat', mode='r', dtype='uint8')\n"
    "r.shape, int(r[::4096].sum()), r.flags.writeable",
    "a = np.load('some_array.npy', mmap_mode='r'); int(a.sum()), type(a).__name__",
]


def _course(root: Path) -> None:
    (root / "examples").mkdir(parents=True)
    (root / "examples" / "ex1.csv").write_text("a,b,c,d,message\n1,2,3,4,hello\n5,6,7,8,world\n")
    (root / "examples" / "ex2.csv").write_text("x\n1\n")
    (root / "notes.txt").write_text("the user's notes\n")
    (root / ".env").write_text("TOKEN=never shown\n")
    (root / "output").mkdir()  # empty but for a hidden file, as a repository keeps it
    (root / "output" / ".gitkeep").write_text("")


def _outputs(kernel_root: Path, sandbox: bool) -> list[str]:
    kernel = start_kernel(kernel_root) if sandbox else start_ipykernel(kernel_root)
    try:
        shown = []
        for cell in CELLS:
            done = kernel.run_ok(cell)
            results = done.of_type("execute_result")
            shown.append(done.stream() + (done.result() if results else ""))
        return shown
    finally:
        kernel.shutdown()


def test_cells_that_write_beside_the_notebook_run_as_on_ipykernel(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    _course(ours)
    shutil.copytree(ours, theirs)
    before = {p: p.read_bytes() for p in ours.rglob("*") if p.is_file()}
    assert _outputs(ours, sandbox=True) == _outputs(theirs, sandbox=False)
    # The user's files are as they were; what the cells wrote is in the layer, kept.
    assert {p: p.read_bytes() for p in before} == before
    assert not (ours / "some_array.npy").exists() and not (ours / "fig").exists()
    layer = ours / ".sandbox-kernel" / "layer"
    assert (layer / "some_array.npy").is_file() and (layer / "fig" / "x.png").is_file()
    assert "9,9,9,9,hello" in (layer / "examples" / "ex1.csv").read_text()


def test_the_next_start_sees_what_the_guest_did(tmp_path: Path) -> None:
    root = tmp_path / "course"
    _course(root)
    kernel = start_kernel(root)
    try:
        kernel.run_ok(
            "import os; os.remove('notes.txt'); open('mine.txt', 'w').write('kept')\n"
            "os.rmdir('output')"
        )
    finally:
        kernel.shutdown()
    (root / "new-data.csv").write_text("n\n1\n")  # the user adds a file between sessions
    (root / "later").mkdir()  # and an empty folder
    kernel = start_kernel(root)
    try:
        names = kernel.run_ok(
            "import os\nsorted(n for n in os.listdir('.') if n.endswith(('.txt', '.csv')))"
        )
        assert names.result() == "['mine.txt', 'new-data.csv']"
        assert kernel.run_ok("open('mine.txt').read()").result() == "'kept'"
        folders = kernel.run_ok("os.path.isdir('later'), os.path.exists('output')")
        assert folders.result() == "(True, False)", "a new folder shown, a removed one gone"
    finally:
        kernel.shutdown()
    assert (root / "notes.txt").read_text() == "the user's notes\n"


def test_off_shows_no_folder(tmp_path: Path) -> None:
    root = tmp_path / "course"
    _course(root)
    kernel = start_kernel(root, extra_env={"SANDBOX_KERNEL_NOTEBOOK_FOLDER": "off"})
    try:
        assert kernel.run_ok("%pwd").result() == "'/app'"
        missing = kernel.run("open('examples/ex1.csv').read()")
        assert missing.reply["ename"] == "FileNotFoundError", missing.describe()
    finally:
        kernel.shutdown()
    assert not (root / ".sandbox-kernel").exists()


def test_a_folder_with_odd_names_runtime_files_and_churn_starts_and_lists(tmp_path: Path) -> None:
    """Issue 47, items 8 and 9, as a kernel meets them: a file named with a latin-1 byte, a
    Jupyter connection file beside the notebook and a download's `.part` file coming and going
    while the kernel starts. The start and every cell work, the folder lists (without the odd
    name and the connection file), and imports work."""
    root = tmp_path / "course"
    _course(root)
    with open(os.open(os.fsencode(root) + b"/caf\xe9-latin1.csv", os.O_WRONLY | os.O_CREAT), "w"):
        pass
    (root / "kernel-4242.json").write_text('{"key": "hmac-secret"}')
    stop = threading.Event()

    def churn() -> None:
        part = root / "tmp14.part"
        while not stop.is_set():
            part.write_bytes(b"partial")
            part.unlink()

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        kernel = start_kernel(root)
        try:
            for _ in range(3):
                names = kernel.run_ok(
                    "import os\nsorted(n for n in os.listdir('.') if n.endswith(('.csv', '.json')))"
                )
                assert names.result() == "[]", "neither the odd name nor the connection file"
            assert kernel.run_ok("import ipywidgets\n'ok'").result() == "'ok'"
            assert kernel.run_ok("open('notes.txt').read()").result() == '"the user\'s notes\\n"'
        finally:
            kernel.shutdown()
    finally:
        stop.set()
        thread.join(10)
