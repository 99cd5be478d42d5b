"""The output firewall's rules for comms: what a guest's widgets may send to the page.

A widget is a model the frontend renders from the state its comm sends, with the view the
state names: the view decides what is written as HTML, fetched or applied as CSS. So, by
default (untrusted), a guest comm's message passes only when:

    its target is jupyter.widget (a model); any other target (a library's own comm, whose
    frontend code is not ours to vouch for, and jupyter.widget.control: only the page opens
    that one) is refused
    on a control comm the PAGE opened (`heard`), only an update_states that answers the
    page's request_states passes, once per request: the firewall's record of each model
    follows only what the page applies, and an answer never makes that record less strict
    (a media source counts as a data: URL only if it was one before and after)
    its (model, view) pair is one ipywidgets or ipympl defines (widget_rules.PAIRS), of the
    standard modules, with module versions that are version specifiers; an update may not
    change the pair; state that carries code for the page to load (anywidget's _esm, _css)
    is refused
    every field its view renders is inert (widget_state.py): markup sanitized by the same
    sanitizer as text/html, typeset text without MathJax's link and style commands, CSS
    values without url() or anything that loads, media and image sources data: URLs only,
    class names plain, link ends never such fields, an Output widget's outputs through the
    bundle rules; a buffer only where a model holds bytes
    it is within the size cap (display_max_bytes, state and buffers together)
    every guest value is type-checked before it is used: a wrong type is a refusal with a
    note, never an exception

A refused comm's later messages are dropped quietly; the refusal itself is one visible note.
`trust_outputs` passes every comm unchanged but for the cap. A display's
application/vnd.jupyter.widget-view+json (the model's id) is firewall.py's.

Must not import: ipykernel.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Final

from sandbox_kernel.kernel.firewall import OutputFirewall
from sandbox_kernel.kernel.sanitize import clean_svg
from sandbox_kernel.kernel.widget_rules import MEDIA_MODELS, MODULES, is_version_range
from sandbox_kernel.kernel.widget_state import (
    Model,
    clean_state,
    media_source_is_data_url,
    model_of,
    refusal,
)
from sandbox_kernel.repl.models import CommMessage

__all__ = ["ALLOWED_MODULES", "AdmittedComm", "WidgetFirewall"]

ALLOWED_MODULES: Final = MODULES
WIDGET_TARGET, CONTROL_TARGET = "jupyter.widget", "jupyter.widget.control"
MAX_MODELS: Final = 100_000  # comms remembered; a flood past it is refused
# ipympl's canvas messages (handle_<type> in its model) and the formats it may download.
FIGURE_MESSAGES: Final = frozenset(
    {"save", "resize", "rubberband", "draw", "binary", "history_buttons", "navigate_mode"}
)
SAVE_FORMATS: Final = frozenset(
    {"png", "jpg", "jpeg", "pdf", "svg", "eps", "ps", "tif", "tiff", "pgf", "raw", "rgba", "webp"}
)


@dataclass
class AdmittedComm:
    """What a comm's message becomes on IOPub."""

    content: dict[str, Any]
    metadata: dict[str, Any]
    buffers: list[bytes]


class WidgetFirewall:
    """One kernel's comm rules, with what it knows of each comm it let open."""

    def __init__(self, firewall: OutputFirewall) -> None:
        self.firewall = firewall
        self._models: dict[str, Model] = {}  # comm_id -> model
        self._controls: dict[str, int] = {}  # the page's control comms -> requests unanswered

    def heard(self, msg_type: str, content: Any) -> None:
        """A page's comm message to the guest (before the guest handles it): the control
        comms the page opens and the states it asks for on them."""
        if not isinstance(content, dict) or not isinstance(content.get("comm_id"), str):
            return
        comm_id = content["comm_id"]
        data = content.get("data")
        if msg_type == "comm_open" and content.get("target_name") == CONTROL_TARGET:
            if comm_id not in self._models:
                self._controls[comm_id] = 0
        elif msg_type == "comm_close":
            self._controls.pop(comm_id, None)
        elif msg_type == "comm_msg" and comm_id in self._controls and _asks_states(data):
            self._controls[comm_id] += 1

    def admit(self, message: CommMessage) -> tuple[AdmittedComm | None, list[str]]:
        """The message as it may leave (None: dropped), and what was removed, for the note."""
        content, buffers = dict(message.content), list(message.buffers)
        comm_id = str(content.get("comm_id", ""))
        size = len(json.dumps(content, default=str)) + sum(len(b) for b in buffers)
        if size > self.firewall.max_bytes:
            cap = self.firewall.max_bytes
            return None, [f"a widget message of {size:,} bytes (over the cap of {cap:,})"]
        if self.firewall.trusted:
            return AdmittedComm(content, message.metadata, buffers), []
        try:
            return self._admit(message.msg_type, comm_id, content, message.metadata, buffers)
        except (TypeError, ValueError, KeyError, AttributeError, IndexError):
            # Fails closed: every field is type-checked first, so this is a defect to fix.
            return None, ["a widget message the firewall could not read"]

    def _admit(
        self,
        msg_type: str,
        comm_id: str,
        content: dict[str, Any],
        metadata: dict[str, Any],
        buffers: list[bytes],
    ) -> tuple[AdmittedComm | None, list[str]]:
        if msg_type == "comm_open":
            return self._open(comm_id, content, metadata, buffers)
        if comm_id in self._controls:
            return self._answer(msg_type, comm_id, content, metadata, buffers)
        if comm_id not in self._models:
            return None, []  # a refused comm's, or one never opened: dropped quietly
        if msg_type == "comm_close":
            self._models.pop(comm_id, None)
            return AdmittedComm(content, {}, []), []
        data = content.get("data")
        removed: list[str] = []
        if isinstance(data, dict):
            try:
                cleaned = self._data(comm_id, dict(data), buffers, removed)
            except _DroppedMessage:  # this message alone: the model stays as it was
                return None, removed
            if cleaned is None:
                self._models.pop(comm_id, None)
                return None, removed
            content["data"], buffers = cleaned
        return AdmittedComm(content, _plain_metadata(metadata), buffers), removed

    def _answer(
        self,
        msg_type: str,
        comm_id: str,
        content: dict[str, Any],
        metadata: dict[str, Any],
        buffers: list[bytes],
    ) -> tuple[AdmittedComm | None, list[str]]:
        """The guest's message on a control comm the page opened: its close, or the one
        update_states that answers each request_states."""
        if msg_type == "comm_close":
            self._controls.pop(comm_id, None)
            return AdmittedComm(content, {}, []), []
        data = content.get("data")
        states = data.get("states") if isinstance(data, dict) else None
        method = data.get("method") if isinstance(data, dict) else None
        if method != "update_states" or not isinstance(states, dict):
            return None, ["a message on the widget control comm other than update_states"]
        if self._controls[comm_id] < 1:
            return None, ["widget states the page did not ask for"]
        self._controls[comm_id] -= 1
        assert isinstance(data, dict)
        removed: list[str] = []
        content["data"], buffers = self._control_states(dict(data), states, buffers, removed)
        return AdmittedComm(content, _plain_metadata(metadata), buffers), removed

    def _open(
        self, comm_id: str, content: dict[str, Any], metadata: dict[str, Any], buffers: list[bytes]
    ) -> tuple[AdmittedComm | None, list[str]]:
        target = content.get("target_name")
        if len(self._models) >= MAX_MODELS:
            return None, [f"a widget past the first {MAX_MODELS:,}"]
        if target == CONTROL_TARGET:
            return None, ["a widget control comm opened by the guest (only the page opens one)"]
        if comm_id in self._controls:
            return None, ["a widget whose comm id is the page's control comm's"]
        if target != WIDGET_TARGET:
            return None, [f"a comm of target {str(target)[:80]!r} (its frontend code is unknown)"]
        data = content.get("data")
        state = data.get("state") if isinstance(data, dict) else None
        if not isinstance(data, dict) or not isinstance(state, dict):
            return None, ["a widget with no state"]
        why = refusal(state)
        if why is not None:
            return None, [why]
        model = model_of(state)
        removed: list[str] = []
        paths, buffers = self._buffers(
            {(): (model, state)}, data.get("buffer_paths"), buffers, removed
        )
        state = self._state(model, dict(state), removed, () in paths)
        self._models[comm_id] = model
        content["data"] = {**data, "state": state, "buffer_paths": paths.get((), [])}
        return AdmittedComm(content, _plain_metadata(metadata), buffers), removed

    def _data(
        self, comm_id: str, data: dict[str, Any], buffers: list[bytes], removed: list[str]
    ) -> tuple[dict[str, Any], list[bytes]] | None:
        """A comm_msg's data and buffers: state updates made inert; None when an update
        would make the model one that is refused."""
        method = data.get("method")
        model = self._models[comm_id]
        if method in ("update", "echo_update"):
            state = data.get("state")
            if not isinstance(state, dict):
                return {**data, "state": {}, "buffer_paths": []}, []
            why = refusal(state, model)
            if why is not None:
                removed.append(why)
                return None
            paths, buffers = self._buffers(
                {(): (model, state)}, data.get("buffer_paths"), buffers, removed
            )
            data["state"] = self._state(model, dict(state), removed, () in paths)
            data["buffer_paths"] = paths.get((), [])
            return data, buffers
        if method == "custom" and model.name == "MPLCanvasModel":
            return _figure_message(data, buffers, removed)
        return data, buffers  # "custom": controls' views only focus or blur on one

    def _control_states(
        self, data: dict[str, Any], states: dict[str, Any], buffers: list[bytes], removed: list[str]
    ) -> tuple[dict[str, Any], list[bytes]]:
        """The control comm's answer to the page's request_states: every model's state."""
        kept: dict[str, Any] = {}
        models: dict[tuple[str, ...], tuple[Model, dict[str, Any]]] = {}
        # The answer is cleaned on copies of the records; each record then keeps the stricter
        # of what it was and what the page may now have (`_stricter`).
        answered: dict[str, tuple[Model, Model]] = {}
        for model_id, entry in states.items():
            if not isinstance(entry, dict) or not isinstance(entry.get("state"), dict):
                continue
            # The page makes the model from the entry's names and sets the state on it: both
            # must say the same.
            named = {
                "_model_module": entry.get("model_module"),
                "_model_name": entry.get("model_name"),
                "_model_module_version": entry.get("model_module_version"),
            }
            full = {**entry["state"], **named}
            differ = [k for k, v in named.items() if k in entry["state"] and entry["state"][k] != v]
            why = (
                f"a widget state whose {', '.join(differ)} differs from its entry's"
                if differ
                else refusal(full) or refusal(full, self._models.get(str(model_id)))
            )
            if why is not None:
                removed.append(why)
                continue
            record = self._models.get(str(model_id))
            model = replace(record) if record is not None else model_of(full)
            if record is not None:
                answered[str(model_id)] = (record, model)
            models[(str(model_id), "state")] = (model, entry["state"])
            kept[str(model_id)] = entry
        paths, buffers = self._buffers(models, data.get("buffer_paths"), buffers, removed)
        for (model_id, _), (model, _) in models.items():
            entry = kept[model_id]
            bytes_in = (model_id, "state") in paths
            state = self._state(model, dict(entry["state"]), removed, bytes_in)
            kept[model_id] = {
                "model_name": model.name,
                "model_module": model.module,
                "model_module_version": entry.get("model_module_version"),
                "state": state,
            }
        for record, model in answered.values():
            _stricter(record, model)
        flat = [[*prefix, *path] for prefix, found in paths.items() for path in found]
        return {**data, "states": kept, "buffer_paths": flat}, buffers

    def _buffers(
        self,
        models: dict[tuple[str, ...], tuple[Model, dict[str, Any]]],
        paths: Any,
        buffers: list[bytes],
        removed: list[str],
    ) -> tuple[dict[tuple[str, ...], list[list[Any]]], list[bytes]]:
        """The buffers a state may carry: bytes only where its model holds bytes (a media
        value, a FileUpload's contents); {prefix: paths under it}, and the buffers kept in
        their order. A media value also says whether it is a data: URL."""
        kept_paths: dict[tuple[str, ...], list[list[Any]]] = {}
        kept: list[bytes] = []
        for path, buffer in zip(paths if isinstance(paths, list) else [], buffers, strict=False):
            found = _owner(models, path)
            if found is None:
                removed.append("a buffer where a widget holds no bytes")
                continue
            prefix, model, rest = found
            kept_paths.setdefault(prefix, []).append(rest)
            kept.append(buffer)
            if model.name in MEDIA_MODELS and rest == ["value"]:
                model.source_is_data_url = media_source_is_data_url(model, bytes(buffer))
        return kept_paths, kept

    def _resolve(self, model_id: str) -> Model | None:
        return self._models.get(model_id)

    def _state(
        self, model: Model, state: dict[str, Any], removed: list[str], bytes_in: bool
    ) -> dict[str, Any]:
        """Every field of the state made inert (widget_state.py); an Output widget's outputs
        through the bundle rules."""
        state = clean_state(model, state, removed, self._resolve, bytes_in)
        if model.name == "OutputModel" and "outputs" in state:
            outputs = state["outputs"]
            state["outputs"] = [
                self._output(o, removed) for o in (outputs if isinstance(outputs, list) else [])
            ]
        return state

    def _output(self, output: Any, removed: list[str]) -> dict[str, Any]:
        """One of an Output widget's outputs, as a notebook output through the bundle rules."""
        if not isinstance(output, dict):
            return {"output_type": "stream", "name": "stdout", "text": ""}
        kind = output.get("output_type")
        if kind == "stream":
            name = "stderr" if output.get("name") == "stderr" else "stdout"
            return {"output_type": "stream", "name": name, "text": str(output.get("text", ""))}
        if kind in ("display_data", "execute_result"):
            shown = self.firewall.bundle(
                output.get("data"), output.get("metadata"), html_note=False
            )
            removed.extend(shown.removed)
            kept = {"output_type": kind, "data": shown.data, "metadata": shown.metadata}
            if kind == "execute_result":
                count = output.get("execution_count")
                kept["execution_count"] = count if isinstance(count, int) else None
            return kept
        if kind == "error":
            return {
                "output_type": "error",
                "ename": str(output.get("ename", "")),
                "evalue": str(output.get("evalue", "")),
                "traceback": [str(line) for line in _lines(output.get("traceback"))],
            }
        return {"output_type": "stream", "name": "stdout", "text": ""}


def _asks_states(data: Any) -> bool:
    return isinstance(data, dict) and data.get("method") == "request_states"


def _stricter(record: Model, answered: Model) -> None:
    """A model's record after an answer to request_states, which the page may or may not
    apply to a model it has: what is stricter of the two for every later check."""
    record.source_is_data_url = record.source_is_data_url and answered.source_is_data_url
    record.allow_html = record.allow_html or answered.allow_html
    if record.page_format != answered.page_format:
        record.page_format = ""  # unknown: the next format decided is sent again


class _DroppedMessage(Exception):
    """A message dropped alone (its comm's model is unchanged)."""


def _figure_message(
    data: dict[str, Any], buffers: list[bytes], removed: list[str]
) -> tuple[dict[str, Any], list[bytes]]:
    """An ipympl canvas's own message: the page calls `handle_<type>` on the model, so only
    ipympl's types pass; a "save" downloads its buffer as `<label>.<format>`, so only
    matplotlib's formats, and an SVG sanitized as an SVG output is."""
    content = data.get("content")
    raw = content.get("data") if isinstance(content, dict) else None
    try:
        message = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        message = None
    kind = message.get("type") if isinstance(message, dict) else None
    if not (isinstance(kind, str) and kind in FIGURE_MESSAGES):
        removed.append(f"a figure message of type {str(kind)[:40]!r}")
        raise _DroppedMessage
    if kind != "save":
        return data, buffers
    assert isinstance(message, dict)
    format_ = message.get("format") or "png"
    if not (isinstance(format_, str) and format_ in SAVE_FORMATS):
        removed.append(f"a figure download as {str(format_)[:40]!r}")
        raise _DroppedMessage
    if format_ == "svg" and buffers:
        cleaned = clean_svg(bytes(buffers[0]).decode("utf-8", "replace"))
        removed.extend(f"{reason} in a figure's SVG download" for reason in cleaned.removed)
        buffers = [cleaned.text.encode(), *buffers[1:]]
    return data, buffers


def _owner(
    models: dict[tuple[str, ...], tuple[Model, dict[str, Any]]], path: Any
) -> tuple[tuple[str, ...], Model, list[Any]] | None:
    """The model a buffer path leads into and the path within its state, if that is a field
    of bytes: a media model's value, a FileUpload's value[i].content (of a file the state
    lists)."""
    if not isinstance(path, list):
        return None
    for prefix, (model, state) in models.items():
        if [str(p) for p in path[: len(prefix)]] != list(prefix):
            continue
        rest = path[len(prefix) :]
        if model.name in MEDIA_MODELS and rest == ["value"]:
            return prefix, model, rest
        upload = model.name == "FileUploadModel" and len(rest) == 3 and rest[0] == "value"
        if upload and isinstance(rest[1], int) and rest[2] == "content":
            files = state.get("value")
            if isinstance(files, list) and 0 <= rest[1] < len(files):
                return (prefix, model, rest) if isinstance(files[rest[1]], dict) else None
    return None


def _lines(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _plain_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """A comm's metadata: ipywidgets sends its protocol version (a version specifier, as a
    module's); scalars only."""
    return {
        str(k): v
        for k, v in metadata.items()
        if isinstance(v, str | int | float | bool) and (k != "version" or is_version_range(v))
    }
