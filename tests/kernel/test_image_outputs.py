"""Images as bytes, and formatters that fail, as on ipykernel (issue 48).

IPython's image formatters return bytes (a PIL Image's PNG, SymPy's after init_printing());
ipykernel's packer sends them base64. Each cell runs on sandbox-python and on the baseline
(ipykernel with the guest's package versions, PIL and SymPy included) in the same test; what a
user sees is compared, and after every cell the variable made before it is still there on
both.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator

import pytest

from tests.kernel.conftest import (
    CELL_TIMEOUT_SECONDS,
    Execution,
    RunningKernel,
    start_ipykernel,
    start_kernel,
)

_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
# Not compared: application/pdf, which the output firewall drops as a type no frontend of
# ours renders (kernel/firewall.py), and image/jpeg when the guest's Pillow has no JPEG
# encoder (its _repr_jpeg_ then gives None, as Pillow does anywhere without libjpeg): the
# test asks the guest, so it compares JPEGs once the image has the encoder.
_NOT_COMPARED = {"application/pdf"}
_PNG = b"\x89PNG\r\n\x1a\n"

# Formatters of every kind of failure, defined once on both kernels.
SETUP = """
class Raises:
    def _repr_png_(self):
        raise ValueError('the png formatter broke')

class WrongType:
    def _repr_png_(self):
        return 42
    def _repr_html_(self):
        return ['not', 'html']

class AllImages:
    def _repr_png_(self):
        return b'\\x89PNG\\r\\n\\x1a\\n fake png'
    def _repr_jpeg_(self):
        return b'\\xff\\xd8\\xff fake jpeg'
    def _repr_svg_(self):
        return b'<svg xmlns="http://www.w3.org/2000/svg"></svg>'
    def _repr_pdf_(self):
        return b'%PDF-1.4 fake'

class BundleBytes:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {
            'text/plain': 'bundle of bytes',
            'image/png': b'\\x89PNG\\r\\n\\x1a\\n png',
            'image/jpeg': b'\\xff\\xd8 jpeg',
            'image/gif': b'GIF89a gif',
            'image/webp': b'RIFF webp',
            'image/bmp': b'BM bmp',
        }

class NoJSON:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {'text/plain': 'no json', 'application/json': {'x': object()}}
"""

CELLS = [
    "from PIL import Image\nimg = Image.new('RGB', (20, 20), 'red')\nimg",
    "display(img)",
    "Image.new('L', (8, 4), 128)",
    "from IPython.display import Image as IPImage\nIPImage(data=img._repr_png_())",
    "import sympy\nsympy.init_printing()\nx = sympy.Symbol('x')\n"
    "sympy.Integral(sympy.sqrt(1 / x), x)",
    "display(x**2 + 1)",
    "sympy.Matrix([[1, x], [x, 1]])",
    "Raises()",
    "display(Raises())",
    "WrongType()",
    "display(WrongType())",
    "AllImages()",
    "display(AllImages())",
    "BundleBytes()",
    "display(BundleBytes())",
    "NoJSON()",
    "display(NoJSON())",
]


def _seen(execution: Execution, left_out: set[str]) -> tuple[object, ...]:
    """Status; per output its kind, MIME types and text/plain (addresses masked); an error
    output and a traceback on stderr both count as 'traceback' (ipykernel shows a formatter's
    failure as an error output, the sandbox as IPython does in a terminal, on stderr)."""
    shown: list[object] = []
    for output in execution.outputs:
        content = output.content
        if output.msg_type in ("execute_result", "display_data"):
            data = content["data"]
            for mime, value in data.items():
                if mime.startswith("image/") and mime != "image/svg+xml":
                    base64.b64decode(value, validate=True)  # base64, as ipykernel sends it
            text = _ADDRESS.sub(" at 0x", str(data.get("text/plain", "")))
            shown.append((output.msg_type, sorted(set(data) - left_out), text))
        elif output.msg_type == "error" or (
            output.msg_type == "stream" and "Traceback" in content["text"]
        ):
            shown.append("traceback")
        elif output.msg_type == "stream" and "FormatterWarning" in content["text"]:
            shown.append("formatter warning")
    return execution.status, shown


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RunningKernel]]:
    ours = start_kernel(tmp_path_factory.mktemp("sandbox"))
    theirs = start_ipykernel(tmp_path_factory.mktemp("baseline"))
    yield [ours, theirs]
    ours.shutdown()
    theirs.shutdown()


def test_images_and_formatters_as_on_ipykernel(kernels: list[RunningKernel]) -> None:
    differences = []
    for running in kernels:
        running.run_ok("survivor = {'made': 'before'}")
        running.run_ok(SETUP)
    jpeg = kernels[0].run_ok("from PIL import features\nfeatures.check('jpg')").result()
    left_out = _NOT_COMPARED | ({"image/jpeg"} if jpeg == "False" else set())
    for code in CELLS:
        left = left_out if "Image" in code or "img" in code else _NOT_COMPARED
        seen = [_seen(k.run(code, timeout=CELL_TIMEOUT_SECONDS), left) for k in kernels]
        if seen[0] != seen[1]:
            differences.append(f"{code!r}:\n  sandbox:   {seen[0]}\n  ipykernel: {seen[1]}")
        for running in kernels:  # the session is intact: nothing rolled back or rebuilt
            after = running.run("survivor", timeout=CELL_TIMEOUT_SECONDS)
            assert after.status == "ok", (code, after.describe())
            [result] = after.of_type("execute_result")
            assert "'made': 'before'" in result.content["data"]["text/plain"], code
    assert not differences, "\n".join(differences)


def test_a_pil_image_is_a_png(kernels: list[RunningKernel]) -> None:
    """The PNG itself: a real image the notebook can show, of the image's size."""
    ours = kernels[0].run_ok("from PIL import Image\nImage.new('RGB', (20, 10), 'blue')")
    [result] = ours.of_type("execute_result")
    png = base64.b64decode(result.content["data"]["image/png"])
    assert png.startswith(_PNG)
    assert int.from_bytes(png[16:20], "big") == 20 and int.from_bytes(png[20:24], "big") == 10


def test_user_expressions_with_image_bytes(kernels: list[RunningKernel]) -> None:
    """user_expressions are formatted in the guest: an image's bytes are base64 there too,
    and a part with no JSON form is left out of that expression's bundle, the reply intact."""
    running = kernels[0]
    running.run_ok("from PIL import Image\nsmall = Image.new('RGB', (4, 4))")
    execution = running.run_ok(
        "pass", user_expressions={"img": "small", "bad": "NoJSON()", "ok": "1 + 1"}
    )
    expressions = execution.reply["user_expressions"]
    assert expressions["ok"]["data"]["text/plain"] == "2"
    assert base64.b64decode(expressions["img"]["data"]["image/png"]).startswith(_PNG)
    bad = expressions["bad"]  # its text, without the part that has no JSON form
    assert bad["status"] == "ok" and bad["data"] == {"text/plain": "no json"}, bad
    assert running.run_ok("survivor").result() == "{'made': 'before'}"
