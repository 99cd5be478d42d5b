"""Packages courses have readers install, as on ipykernel (issue 48).

send2trash reads `os.getuid()` when imported, which WASI's os lacks: `%pip install send2trash`
worked and `import send2trash` then failed with AttributeError. The guest gives os the user
and group ids (guest/imports.py, `user_ids`); a cell that checks them against a file the user
made runs on sandbox-python and on ipykernel in the same test, and a package that does what
send2trash does at import and on use installs through `%pip` from a real index on 127.0.0.1
and moves a file to the user's trash. Its command (a console script, as `!pylint` after
`%pip install pylint` in a course) runs with `!`, its status in `_exit_code`; the image's own
commands (`isympy`, `ipython`: interactive) keep the clear "runs no programs" error.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kernel.conftest import start_ipykernel, start_kernel
from tests.package_index import PackageIndex

IDS_CELL = """
import os
with open('owned.txt', 'w') as handle:
    handle.write('mine')
ids = [getattr(os, name)() for name in ('getuid', 'geteuid', 'getgid', 'getegid')]
([type(value).__name__ for value in ids],
 os.stat('owned.txt').st_uid == os.geteuid(),
 os.stat('owned.txt').st_gid == os.getegid(),
 os.getuid.__name__)
"""

# What send2trash's freedesktop module does: the uid read at import, a trash in the home
# folder made and the file moved there.
TRASHLIKE = """
import os
import os.path as op
import shutil

uid = os.getuid()
HOME_TRASH = op.join(op.expanduser('~'), '.local', 'share', 'Trash')


def trash(path):
    files = op.join(HOME_TRASH, 'files')
    os.makedirs(files, 0o700, exist_ok=True)
    shutil.move(path, op.join(files, op.basename(path)))
    return op.join('.Trash-%d' % uid, op.basename(path))


def main():
    import sys
    if len(sys.argv) < 2:
        print('usage: %s FILE...' % op.basename(sys.argv[0]), file=sys.stderr)
        return 2
    for path in sys.argv[1:]:
        print(trash(path))
    return 0
"""


ENTRY_POINTS = "[console_scripts]\ntrash = trashlike:main\n"


@pytest.fixture(scope="module")
def index() -> Iterator[PackageIndex]:
    served = PackageIndex()
    served.add(
        "trashlike",
        "1.0",
        {
            "trashlike.py": TRASHLIKE,
            "trashlike-1.0.dist-info/entry_points.txt": ENTRY_POINTS,
        },
    )
    with served:
        yield served


def test_user_ids_as_on_ipykernel(tmp_path_factory: pytest.TempPathFactory) -> None:
    kernels = [
        start_kernel(tmp_path_factory.mktemp("sandbox")),
        start_ipykernel(tmp_path_factory.mktemp("baseline")),
    ]
    try:
        seen = [running.run_ok(IDS_CELL).result() for running in kernels]
    finally:
        for running in kernels:
            running.shutdown()
    assert seen[0] == seen[1] == "(['int', 'int', 'int', 'int'], True, True, 'getuid')", seen


def test_a_package_that_reads_the_uid_at_import_installs_and_runs(
    tmp_path_factory: pytest.TempPathFactory, index: PackageIndex
) -> None:
    running = start_kernel(tmp_path_factory.mktemp("pip"), extra_env=index.pip_env())
    try:
        running.run_ok("survivor = 'made before'")
        installed = running.run_ok("%pip install trashlike")
        assert "Successfully installed trashlike-1.0" in installed.stream(), installed.describe()
        moved = running.run_ok(
            "import os, trashlike\n"
            "open('practice.txt', 'w').write('hi')\n"
            "where = trashlike.trash('practice.txt')\n"
            "where, os.path.exists('practice.txt'), "
            "os.listdir(os.path.join(trashlike.HOME_TRASH, 'files'))"
        )
        assert moved.result() == "('.Trash-0/practice.txt', False, ['practice.txt'])"
        command = running.run_ok(
            "open('notes.txt', 'w').write('hi')\n!trash notes.txt\nprint(_exit_code)\n"
            "!trash\nprint(_exit_code)"
        ).stream()
        assert command.replace("\r\n", "\n") == (
            ".Trash-0/notes.txt\n0\nusage: trash FILE...\n2\n"
        ), command
        image = running.run_ok("!isympy\nprint(_exit_code)").stream()
        assert "sh: isympy: not found (the sandbox runs no programs" in image, image
        assert image.endswith("127\n"), image
        assert running.run_ok("survivor").result() == "'made before'"
    finally:
        running.shutdown()
