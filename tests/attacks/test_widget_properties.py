"""The widget firewall hunted by property: hypothesis builds widget states over every
ipywidgets and ipympl model (their own Python classes, the versions the guest runs), shows
each with every view name of every module, sets any field (and a few no class has) to hostile
values, carries bytes at any path, then updates them; a simulated page merges what the
firewall let out, as a widget manager does, and after every message that page must be inert:

    every model's (model, view) pair is one its package's classes declare
    module versions are version specifiers (no '/', ':', '#', '?', '@')
    what a view writes as HTML is inert HTML (html5lib, tests/attacks/inert.py); what it
    typesets has none of MathJax's link, style or loading commands
    every CSS value (style and layout models, ipympl's cursor, colour tags) loads nothing
    an Image/Video/Audio with format 'url' has a data: URL of its kind as its value, and
    ipympl's saved image is a data: image
    bytes sit only where a model holds bytes, and a link never writes a rendered field

The truth here is taken from ipywidgets' and ipympl's classes, not from widget_rules.py.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox_kernel.kernel.firewall import OutputFirewall
from sandbox_kernel.kernel.widget_rules import PAIRS
from sandbox_kernel.kernel.widgets import WidgetFirewall
from sandbox_kernel.repl.models import CommMessage
from tests.attacks.inert import assert_inert_bundle, assert_inert_html

IDENTITY = ("_model_module", "_model_name", "_view_module", "_view_name")
BEACON = "http://127.0.0.1:9/beacon"
HOSTILE = [
    '<img src=x onerror="window.top.__pwned=1">',
    "<script>window.top.__pwned=1</script>",
    '<svg onload="alert(1)"><a href="javascript:alert(1)">x</a></svg>',
    f"<img src='{BEACON}'>",
    f"url({BEACON})",
    f"url('{BEACON}')",
    f"red; background: url({BEACON})",
    f"u\\72l({BEACON})",
    f'image-set("{BEACON}" 1x)',
    f"-webkit-image-set(url({BEACON}) 1x)",
    f"@import '{BEACON}'",
    "expression(alert(1))",
    f"linear-gradient(red, blue), url({BEACON})",
    "$\\href{javascript:alert(1)}{x}$",
    "\\(\\style{background:url(" + BEACON + ")}{x}\\)",
    "$$\\require{html}\\class{jp-Dialog}{x}$$",
    f'$\\mmlToken{{mi}}[href="{BEACON}"]{{X}}$',
    "$\\mathtip{x}{<b>tip</b>}$",
    f"{BEACON}",
    "javascript:alert(1)",
    "//127.0.0.1:9/x",
    "data:image/png;base64,iVBORw0KGgo=",
    "data:text/html,<script>alert(1)</script>",
    "^0.11.0/../../evil@1/x.js?",
    "https://evil.example/x.js#",
    "2.0.0",
    "url",
    "png",
    "red",
    "1px solid red",
    "fa-check jp-Dialog",
    "jp-Dialog",
    "IPY_MODEL_nope",
    "",
]
EXTRA_FIELDS = ["value", "format", "description", "description_allow_html", "_data_url",
                "_cursor", "source", "target", "outputs", "icon", "icons", "_dom_classes",
                "background", "_esm"]  # fmt: skip
BYTES = [f"{BEACON}".encode(), b"data:image/png;base64,iVBORw0KGgo=", b"data:video/mp4;base64,AA==",
         b"data:audio/wav;base64,AA==", b"\x89PNG\r\n", b"javascript:alert(1)"]  # fmt: skip
BUFFER_PATHS = [["value"], ["description"], ["_data_url"], ["value", 0, "content"], ["_cursor"]]
LATEX_COMMANDS = re.compile(
    r"\\(href|url|style|class|cssId|htmlData|unicode|require|bbox|mmlToken|mathtip|texttip"
    r"|toggle)\b"
)
VERSION_CHARS = re.compile(r"[0-9A-Za-z.^~<>=|*+ \-]*")
CSS_LOADING = ("url(", "image-set(", "image(", "@import", "expression(", "element(", "\\", "src(")
RENDERED_BY_LINKS = {"value", "format", "description", "description_allow_html", "layout",
                     "style", "outputs", "icon", "icons", "children", "source", "target",
                     "toolitems"}  # fmt: skip


def _widget_classes() -> list[type]:
    import ipympl.backend_nbagg  # noqa: F401  (registers its classes)
    import ipywidgets

    found: list[type] = []
    stack = [ipywidgets.Widget]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.__module__.startswith(("ipywidgets", "ipympl")) and "_model_name" in dir(cls):
            found.append(cls)
    return sorted(set(found), key=lambda c: f"{c.__module__}.{c.__qualname__}")


@cache
def declared() -> dict[str, Any]:
    """What ipywidgets' and ipympl's classes declare: their (model, view) pairs, and a default
    state (without buffers) of each class that can be made with no arguments."""
    from ipywidgets.widgets.widget import _remove_buffers

    pairs: set[tuple[Any, ...]] = set()
    states: list[tuple[str, dict[str, Any], list[Any], list[bytes]]] = []
    for cls in _widget_classes():
        traits = cls.class_traits()
        values = [traits[k].default_value if k in traits else None for k in IDENTITY]
        pairs.add(tuple(values))
        try:
            widget = cls()
        except Exception:  # an abstract class, or one that needs arguments
            continue
        state, paths, buffers = _remove_buffers(widget.get_state())
        state = {k: list(v) if isinstance(v, tuple) else v for k, v in state.items()}
        states.append((cls.__name__, state, paths, [bytes(b) for b in buffers]))
        widget.close()
    return {"pairs": pairs, "states": states}


def _allowed(state: dict[str, Any]) -> bool:
    pair = tuple(state.get(k) for k in IDENTITY)
    if pair in declared()["pairs"]:
        return True
    return pair[3] is None and any(p[:2] == pair[:2] and p[3] is None for p in declared()["pairs"])


class Page:
    """A widget manager's view of the models: states merged from what the firewall let out."""

    def __init__(self) -> None:
        self.models: dict[str, dict[str, Any]] = {}

    def receive(self, content: dict[str, Any], buffers: list[bytes], opening: bool) -> None:
        data = content["data"]
        state = dict(data.get("state", {}))
        for path, buffer in zip(data.get("buffer_paths", []), buffers, strict=True):
            target: Any = state
            for step in path[:-1]:
                target = target[step]
            target[path[-1]] = bytes(buffer)
        comm_id = content["comm_id"]
        self.models[comm_id] = state if opening else {**self.models[comm_id], **state}

    def assert_inert(self) -> None:
        for comm_id, state in self.models.items():
            where = f"{state.get('_model_name')} as {state.get('_view_name')}"
            assert _allowed(state), f"{where}: not a declared pair"
            for key in ("_model_module_version", "_view_module_version"):
                version = state.get(key)
                assert version is None or VERSION_CHARS.fullmatch(version), (where, version)
            _assert_markup(state, where)
            _assert_css(state, where)
            _assert_sources(state, where)
            self._assert_links(state, where)
            _assert_bytes(state, where, comm_id)

    def _assert_links(self, state: dict[str, Any], where: str) -> None:
        if state["_model_name"] not in ("LinkModel", "DirectionalLinkModel"):
            return
        for end in (state.get("source"), state.get("target")):
            if end is None:
                continue
            model_id = end[0].removeprefix("IPY_MODEL_")
            assert model_id in self.models, f"{where}: links a model the page never got"
            linked = self.models[model_id]["_model_name"]
            assert not linked.endswith(("StyleModel", "LayoutModel")), (where, end)
            assert end[1] not in RENDERED_BY_LINKS and not end[1].startswith("_"), (where, end)


def _assert_markup(state: dict[str, Any], where: str) -> None:
    view = state.get("_view_name")
    if view in ("HTMLView", "HTMLMathView"):
        assert_inert_html(str(state.get("value", "")), where)
    if _js_truthy(state.get("description_allow_html")):  # as the page reads the switch
        assert_inert_html(str(state.get("description", "")), where)
    for key in ("description", "value"):
        text = state.get(key)
        if isinstance(text, str):
            assert not LATEX_COMMANDS.search(text) or (
                key == "value" and view not in ("LabelView", "HTMLMathView", "HTMLView")
            ), (where, key, text)
    outputs = state.get("outputs") if state["_model_name"] == "OutputModel" else []
    for output in outputs or []:
        if output.get("output_type") in ("display_data", "execute_result"):
            assert_inert_bundle(output["data"], where)


def _js_truthy(value: Any) -> bool:
    return isinstance(value, list | dict) or bool(value)


def _assert_css(state: dict[str, Any], where: str) -> None:
    model = state["_model_name"]
    values: list[Any] = []
    if model.endswith(("StyleModel", "LayoutModel")):
        values = [v for k, v in state.items() if not k.startswith("_")]
    if model == "MPLCanvasModel":
        values = [state.get("_cursor")]
    if model == "ColorsInputModel":
        values = list(state.get("value") or [])
    for value in values:
        if value is None or isinstance(value, bool):  # the HTML switch, a bool once it passes
            continue
        assert isinstance(value, str), (where, value)
        flat = value.lower().replace(" ", "")
        assert not any(c in flat for c in CSS_LOADING), f"{where}: CSS {value!r}"
        assert ";" not in value and "{" not in value, f"{where}: CSS {value!r}"
    for name in state.get("_dom_classes") or []:
        assert re.fullmatch(r"[A-Za-z0-9_-]*", name), (where, name)


def _assert_sources(state: dict[str, Any], where: str) -> None:
    family = {"ImageView": "image", "VideoView": "video", "AudioView": "audio"}.get(
        str(state.get("_view_name"))
    )
    if family is not None and state.get("format") == "url":
        value = state.get("value")
        assert isinstance(value, bytes), (where, value)
        assert value.decode().startswith(f"data:{family}/"), f"{where}: fetches {value[:80]!r}"
    if state["_model_name"] == "MPLCanvasModel":
        url = state.get("_data_url")
        assert url is None or str(url).startswith("data:image/"), (where, url)


def _assert_bytes(state: dict[str, Any], where: str, comm_id: str) -> None:
    for key, value in state.items():
        if isinstance(value, bytes):
            assert key == "value" and state["_model_name"] in (
                "ImageModel", "VideoModel", "AudioModel"), (where, key)  # fmt: skip


# -- strategies -----------------------------------------------------------------------------

_ids = itertools.count()


def _values(ids: list[str]) -> st.SearchStrategy[Any]:
    hostile = st.sampled_from(HOSTILE)
    link = st.tuples(st.sampled_from([*ids, "nope"]), st.sampled_from([*EXTRA_FIELDS, "x"]))
    return st.one_of(
        hostile,
        st.text(max_size=20),
        st.none(),
        st.booleans(),
        st.integers(-3, 3),
        st.lists(hostile, max_size=3),
        link.map(lambda end: [f"IPY_MODEL_{end[0]}", end[1]]),
        st.just([{"output_type": "display_data", "data": {"text/html": HOSTILE[0]}}]),
    )


@st.composite
def _state(draw: st.DrawFn, ids: list[str]) -> tuple[dict[str, Any], list[Any], list[bytes]]:
    _, base, paths, buffers = draw(st.sampled_from(declared()["states"]))
    state = dict(base)
    views = sorted({p[3] for p in PAIRS if p[3]} | {"OutputView", "StyleView"})
    modules = [*sorted({p[0] for p in PAIRS}), "https://127.0.0.1:9/x.js", None]
    if draw(st.booleans()):
        state["_view_name"] = draw(st.sampled_from([*views, None]))
    if draw(st.integers(0, 4)) == 0:
        state["_view_module"] = draw(st.sampled_from(modules))
    if draw(st.integers(0, 4)) == 0:
        state[draw(st.sampled_from(["_model_module_version", "_view_module_version"]))] = draw(
            st.sampled_from(HOSTILE)
        )
    fields = sorted(set(state) - set(IDENTITY)) + EXTRA_FIELDS
    for key in draw(st.lists(st.sampled_from(fields), max_size=6)):
        state[key] = draw(_values(ids))
    paths, buffers = list(paths), list(buffers)
    for path in draw(st.lists(st.sampled_from(BUFFER_PATHS), max_size=2)):
        paths.append(path)
        buffers.append(draw(st.sampled_from(BYTES)))
    return state, paths, buffers


def _message(msg_type: str, content: dict[str, Any], buffers: list[bytes]) -> CommMessage:
    return CommMessage(
        msg_type=msg_type,  # type: ignore[arg-type]
        content=content,
        buffers=[base64.b64encode(b) for b in buffers],  # type: ignore[misc]
    )


def _send(firewall: WidgetFirewall, page: Page, message: CommMessage) -> None:
    admitted, _ = firewall.admit(message)
    if admitted is not None and message.msg_type != "comm_close":
        page.receive(admitted.content, admitted.buffers, message.msg_type == "comm_open")
    page.assert_inert()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_no_widget_state_makes_the_page_unsafe(data: st.DataObject) -> None:
    firewall, page = WidgetFirewall(OutputFirewall()), Page()
    ids: list[str] = []
    for _ in range(data.draw(st.integers(1, 4), label="models")):
        comm_id = f"m{next(_ids)}"
        state, paths, buffers = data.draw(_state(ids), label="open")
        content = {"comm_id": comm_id, "target_name": "jupyter.widget",
                   "data": {"state": state, "buffer_paths": paths}}  # fmt: skip
        _send(firewall, page, _message("comm_open", content, buffers))
        ids.append(comm_id)
    for _ in range(data.draw(st.integers(0, 4), label="updates")):
        comm_id = data.draw(st.sampled_from(ids), label="updated")
        state, paths, buffers = data.draw(_state(ids), label="update")
        keys = data.draw(st.lists(st.sampled_from(sorted(state)), max_size=4), label="keys")
        update = {k: state[k] for k in keys}
        kept = [(p, b) for p, b in zip(paths, buffers, strict=True) if data.draw(st.booleans())]
        content = {"comm_id": comm_id, "data": {"method": "update", "state": update,
                   "buffer_paths": [p for p, _ in kept]}}  # fmt: skip
        _send(firewall, page, _message("comm_msg", content, [b for _, b in kept]))
    if data.draw(st.booleans(), label="control"):
        _control_states(firewall, page, data, ids)
        # The page may or may not have applied the answer: later updates stay inert.
        for _ in range(data.draw(st.integers(0, 3), label="later updates")):
            comm_id = data.draw(st.sampled_from(ids), label="updated later")
            state, paths, buffers = data.draw(_state(ids), label="later update")
            keys = data.draw(st.lists(st.sampled_from(sorted(state)), max_size=4), label="keys")
            content = {"comm_id": comm_id, "data": {"method": "update",
                       "state": {k: state[k] for k in keys}, "buffer_paths": []}}  # fmt: skip
            _send(firewall, page, _message("comm_msg", content, []))


def _control_states(
    firewall: WidgetFirewall, page: Page, data: st.DataObject, ids: list[str]
) -> None:
    """The control comm's answer to a reconnecting page: every model's full state at once
    (ids the page knows and new ones), which the page makes its models from."""
    control = {"comm_id": "control", "target_name": "jupyter.widget.control", "data": {}}
    assert firewall.admit(_message("comm_open", control, []))[0] is None  # the guest's: refused
    firewall.heard("comm_open", control)  # the page's own
    asked = data.draw(st.booleans(), label="asked")
    if asked:
        firewall.heard("comm_msg", {"comm_id": "control", "data": {"method": "request_states"}})
    states: dict[str, Any] = {}
    paths: list[list[Any]] = []
    buffers: list[bytes] = []
    for model_id in data.draw(st.lists(st.sampled_from([*ids, "fresh"]), max_size=3)):
        state, own_paths, own_buffers = data.draw(_state(ids), label="control state")
        named = state if data.draw(st.booleans()) else data.draw(_state(ids))[0]
        states[model_id] = {"model_name": named.get("_model_name"),
                            "model_module": named.get("_model_module"),
                            "model_module_version": state.get("_model_module_version"),
                            "state": state}  # fmt: skip
        paths += [[model_id, "state", *p] for p in own_paths]
        buffers += own_buffers
    content = {"comm_id": "control", "data": {"method": "update_states", "states": states,
               "buffer_paths": paths}}  # fmt: skip
    admitted, _ = firewall.admit(_message("comm_msg", content, buffers))
    assert (admitted is not None) == asked, "an answer passes once per request, and only then"
    assert firewall.admit(_message("comm_msg", content, buffers))[0] is None  # asked once
    if admitted is not None and data.draw(st.booleans(), label="page applies the answer"):
        data_out = admitted.content["data"]
        for model_id, entry in data_out["states"].items():
            state = dict(entry["state"])
            for path, buffer in zip(data_out["buffer_paths"], admitted.buffers, strict=True):
                if path[0] == model_id:
                    target: Any = state
                    for step in path[2:-1]:
                        target = target[step]
                    target[path[-1]] = bytes(buffer)
            # The page makes the model's class from the entry's names, then sets the state.
            for key, named_key in (
                ("_model_name", "model_name"),
                ("_model_module", "model_module"),
            ):
                assert state.setdefault(key, entry[named_key]) == entry[named_key], (entry, state)
            page.models[model_id] = state
    page.assert_inert()


def test_the_pairs_are_what_the_packages_declare() -> None:
    """widget_rules.PAIRS against ipywidgets' and ipympl's own classes: every declared pair
    is allowed (legit widgets keep working) and nothing else is."""
    truth = declared()["pairs"]
    with_views = {p for p in truth if p[3] is not None}
    assert with_views == {p for p in PAIRS if p[3] is not None}
    viewless = {p[:2] for p in truth if p[3] is None}
    assert viewless == {p[:2] for p in PAIRS if p[3] is None}


@pytest.mark.parametrize("index", range(len(declared()["states"])))
def test_every_default_widget_passes_unchanged(index: int) -> None:
    """Each class's own state, as ipywidgets sends it, passes with nothing removed (bytes
    aside in an abstract model with no view, such as _Media: nothing renders them)."""
    name, state, paths, buffers = declared()["states"][index]
    firewall = WidgetFirewall(OutputFirewall())
    content = {"comm_id": f"d{index}", "target_name": "jupyter.widget",
               "data": {"state": dict(state), "buffer_paths": paths}}  # fmt: skip
    admitted, removed = firewall.admit(_message("comm_open", content, buffers))
    assert admitted is not None, (name, removed)
    if state.get("_view_name") is None:
        return
    assert removed == [], (name, removed)
    assert admitted.content["data"]["state"] == state, name


@pytest.mark.parametrize(
    ("version", "accepted"),
    [
        ("2.0.0", True), ("^0.12", True), ("~1.5.0", True), (">=1.0.0 <3", True),
        ("1.x || ^2.0.0-beta.1", True), ("1.2.3 - 2.3.4", True), ("*", True), ("", True),
        ("^0.11.0/../../evil@1/x.js?", False), ("https://evil.example/x.js#", False),
        ("2.0.0#x", False), ("@evil/pkg", False), ("1.0.0:x", False), ("1.0.0%2f..", False),
        ("^1.0.0\n/x", False), ("1" * 80, False), ("../x", False), ("file:x", False),
    ],
)  # fmt: skip
def test_module_versions_are_specifiers_only(version: str, accepted: bool) -> None:
    """A model's, a view's and a comm's protocol version: a semver range and nothing else."""
    firewall = WidgetFirewall(OutputFirewall())
    _, state, paths, buffers = next(s for s in declared()["states"] if s[0] == "IntSlider")
    for key in ("_model_module_version", "_view_module_version"):
        content = {"comm_id": f"v-{key}", "target_name": "jupyter.widget",
                   "data": {"state": {**state, key: version}, "buffer_paths": paths}}  # fmt: skip
        admitted, _ = firewall.admit(_message("comm_open", content, buffers))
        assert (admitted is not None) == accepted, (key, version)
    message = CommMessage(
        msg_type="comm_open",
        content={"comm_id": "v-meta", "target_name": "jupyter.widget",
                 "data": {"state": state, "buffer_paths": paths}},
        metadata={"version": version},
        buffers=[base64.b64encode(b) for b in buffers],  # type: ignore[misc]
    )  # fmt: skip
    admitted, _ = firewall.admit(message)
    assert admitted is not None and ("version" in admitted.metadata) == accepted


def test_the_layout_templates_css_passes() -> None:
    """AppLayout's and GridspecLayout's grid areas (quoted names on several lines) and
    repeat() tracks are CSS values a layout keeps."""
    import ipywidgets as w

    app = w.AppLayout(header=w.Button(), center=w.Button(), footer=w.Button())
    grid = w.GridspecLayout(2, 2)
    grid[0, 0] = w.Button()
    for layout in (app.layout, grid.layout, grid[0, 0].layout):
        state = layout.get_state()
        content = {"comm_id": layout.model_id, "target_name": "jupyter.widget",
                   "data": {"state": dict(state), "buffer_paths": []}}  # fmt: skip
        admitted, removed = WidgetFirewall(OutputFirewall()).admit(
            _message("comm_open", content, [])
        )
        assert admitted is not None and removed == [], removed
        assert admitted.content["data"]["state"] == state


# -- odd types ------------------------------------------------------------------------------

_ODD = st.one_of(
    st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.sampled_from(["@jupyter-widgets/controls", "ImageModel", "ImageView", "update", "save"]),
)


def _oddly(draw: st.DrawFn, value: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """`value` with some of `keys` replaced by odd-typed values."""
    changed = dict(value)
    for key in draw(st.lists(st.sampled_from(keys), max_size=len(keys))):
        changed[key] = draw(_ODD)
    return changed


@st.composite
def _odd_message(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    image = {"_model_module": "@jupyter-widgets/controls", "_model_name": "ImageModel",
             "_view_module": "@jupyter-widgets/controls", "_view_name": "ImageView",
             "_model_module_version": "2.0.0", "_view_module_version": "2.0.0",
             "format": "png", "description": "x", "description_allow_html": False,
             "_dom_classes": [], "layout": "IPY_MODEL_m", "style": "IPY_MODEL_m"}  # fmt: skip
    state = _oddly(draw, image, list(image))
    kind = draw(st.sampled_from(["open", "update", "control", "figure"]))
    if kind == "open":
        content = _oddly(draw, {"comm_id": "m2", "target_name": "jupyter.widget",
                                "data": {"state": state, "buffer_paths": [["value"]]}},
                         ["target_name", "data"])  # fmt: skip
        return "comm_open", content
    if kind == "update":
        data = _oddly(draw, {"method": "update", "state": state, "buffer_paths": [["value"]]},
                      ["method", "state", "buffer_paths"])  # fmt: skip
        return "comm_msg", {"comm_id": draw(st.sampled_from(["m", "fig"])), "data": data}
    if kind == "control":
        entry = _oddly(draw, {"model_module": "@jupyter-widgets/controls",
                              "model_name": "ImageModel", "model_module_version": "2.0.0",
                              "state": state}, ["model_module", "model_name",
                              "model_module_version", "state"])  # fmt: skip
        data = _oddly(draw, {"method": "update_states", "states": {"m": entry},
                             "buffer_paths": [["m", "state", "value"]]},
                      ["method", "states", "buffer_paths"])  # fmt: skip
        return "comm_msg", {"comm_id": "control", "data": data}
    inner = _oddly(draw, {"type": "save", "format": "svg"}, ["type", "format"])
    raw = draw(st.sampled_from([json.dumps(inner), inner, ["x"], None]))
    data = {"method": "custom", "content": draw(st.sampled_from([{"data": raw}, raw]))}
    return "comm_msg", {"comm_id": "fig", "data": data}


@settings(max_examples=300, deadline=None)
@given(_odd_message(), st.lists(st.sampled_from(BYTES), max_size=2))
def test_odd_typed_values_are_refused_never_raised(
    message: tuple[str, dict[str, Any]], buffers: list[bytes]
) -> None:
    """A non-hashable or odd-typed value in any field the firewall reads (names, modules,
    versions, method, states, buffer paths, a figure message's type and format) is a
    refusal or a cleaning with a note, never an exception, and never the firewall's own
    fail-closed net ("could not read")."""
    firewall = WidgetFirewall(OutputFirewall())
    image = {"_model_module": "@jupyter-widgets/controls", "_model_name": "ImageModel",
             "_view_module": "@jupyter-widgets/controls", "_view_name": "ImageView"}  # fmt: skip
    mpl = {"_model_module": "jupyter-matplotlib", "_model_name": "MPLCanvasModel",
           "_view_module": "jupyter-matplotlib", "_view_name": "MPLCanvasView"}  # fmt: skip
    for comm_id, state in (("m", image), ("fig", mpl)):
        opened = {"comm_id": comm_id, "target_name": "jupyter.widget", "data": {"state": state}}
        assert firewall.admit(_message("comm_open", opened, []))[0] is not None
    firewall.heard("comm_open", {"comm_id": "control", "target_name": "jupyter.widget.control"})
    firewall.heard("comm_msg", {"comm_id": "control", "data": {"method": "request_states"}})
    msg_type, content = message
    admitted, removed = firewall.admit(_message(msg_type, content, buffers))
    assert not any("could not read" in note for note in removed), (content, removed)
    if admitted is not None:
        page = Page()
        page.models = {"m": dict(image), "fig": dict(mpl)}
        if msg_type == "comm_open":
            page.receive(admitted.content, admitted.buffers, opening=True)
            page.assert_inert()


@pytest.mark.parametrize("applied", [True, False], ids=["page-applies", "page-keeps-its-own"])
def test_an_answer_to_request_states_never_loosens_the_record(applied: bool) -> None:
    """An Image whose bytes are the beacon's address; the guest answers the page's
    request_states with a data: URL for it. Whether or not the page applies that answer, a
    later format='url' without new bytes must not pass: the record keeps the stricter."""
    firewall, page = WidgetFirewall(OutputFirewall()), Page()
    image = {"_model_module": "@jupyter-widgets/controls", "_model_name": "ImageModel",
             "_view_module": "@jupyter-widgets/controls", "_view_name": "ImageView",
             "format": "png"}  # fmt: skip
    opened = {"comm_id": "m", "target_name": "jupyter.widget",
              "data": {"state": image, "buffer_paths": [["value"]]}}  # fmt: skip
    _send(firewall, page, _message("comm_open", opened, [BEACON.encode()]))
    firewall.heard("comm_open", {"comm_id": "control", "target_name": "jupyter.widget.control"})
    firewall.heard("comm_msg", {"comm_id": "control", "data": {"method": "request_states"}})
    entry = {"model_module": image["_model_module"], "model_name": "ImageModel",
             "model_module_version": "2.0.0", "state": {**image, "format": "url"}}  # fmt: skip
    answer = {"comm_id": "control", "data": {"method": "update_states", "states": {"m": entry},
              "buffer_paths": [["m", "state", "value"]]}}  # fmt: skip
    admitted, _ = firewall.admit(_message("comm_msg", answer, [b"data:image/png;base64,AA=="]))
    assert admitted is not None
    if applied:
        state = dict(admitted.content["data"]["states"]["m"]["state"])
        page.models["m"] = {**state, "value": bytes(admitted.buffers[0])}
    switch = {"comm_id": "m", "data": {"method": "update", "state": {"format": "url"}}}
    _send(firewall, page, _message("comm_msg", switch, []))
    if not applied:
        assert page.models["m"].get("format") != "url", page.models["m"]
