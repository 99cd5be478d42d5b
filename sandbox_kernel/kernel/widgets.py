"""The output firewall's rules for comms: what a guest's widgets may send to the page.

A widget is a model the frontend renders from the state its comm sends; some state fields
are HTML, and a model's module names the JavaScript that renders it. So, by default
(untrusted), a guest comm's message passes only when:

    its target is jupyter.widget (a model) or jupyter.widget.control (the states the page
    asks for when it reconnects); any other target (a library's own comm, whose frontend
    code is not ours to vouch for) is refused
    its model and view modules are the standard ones (ALLOWED_MODULES: ipywidgets' base,
    controls and output, and ipympl); a model of another module, or state that carries code
    for the page to load (anywidget's _esm and _css), is refused
    its HTML fields are sanitized by the same sanitizer as text/html: HTML and HTMLMath's
    value, a description shown as HTML (description_allow_html), an Output widget's outputs
    (each through the bundle rules)
    it is within the size cap (display_max_bytes, state and buffers together)

A refused comm's later messages are dropped quietly; the refusal itself is one visible note.
`trust_outputs` passes every comm unchanged but for the cap. A display's
application/vnd.jupyter.widget-view+json (the model's id) is firewall.py's.

Must not import: ipykernel.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from sandbox_kernel.kernel.firewall import OutputFirewall
from sandbox_kernel.kernel.sanitize import clean_html
from sandbox_kernel.repl.models import CommMessage

__all__ = ["ALLOWED_MODULES", "AdmittedComm", "WidgetFirewall"]

ALLOWED_MODULES: Final = frozenset(
    {
        "@jupyter-widgets/base",
        "@jupyter-widgets/controls",
        "@jupyter-widgets/output",
        "jupyter-matplotlib",
    }
)
WIDGET_TARGET, CONTROL_TARGET = "jupyter.widget", "jupyter.widget.control"
CODE_KEYS: Final = frozenset({"_esm", "_css", "_anywidget_id"})  # code for the page to load
HTML_VALUE_MODELS: Final = frozenset({"HTMLModel", "HTMLMathModel"})
MAX_MODELS: Final = 100_000  # comms remembered; a flood past it is refused


@dataclass
class AdmittedComm:
    """What a comm's message becomes on IOPub."""

    content: dict[str, Any]
    metadata: dict[str, Any]
    buffers: list[bytes]


@dataclass
class _Model:
    name: str
    description: str = ""  # the raw description, sanitized if it is ever shown as HTML
    allow_html: bool = False


class WidgetFirewall:
    """One kernel's comm rules, with what it knows of each comm it let open."""

    def __init__(self, firewall: OutputFirewall) -> None:
        self.firewall = firewall
        self._models: dict[str, _Model | None] = {}  # comm_id -> model; None: a control comm

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
        if message.msg_type == "comm_open":
            return self._open(comm_id, content, message.metadata, buffers)
        if comm_id not in self._models:
            return None, []  # a refused comm's, or one never opened: dropped quietly
        if message.msg_type == "comm_close":
            self._models.pop(comm_id, None)
            return AdmittedComm(content, {}, []), []
        data = content.get("data")
        removed: list[str] = []
        if isinstance(data, dict):
            content["data"] = self._data(comm_id, dict(data), removed)
            if content["data"] is None:
                self._models.pop(comm_id, None)
                return None, removed
        return AdmittedComm(content, _plain_metadata(message.metadata), buffers), removed

    def _open(
        self, comm_id: str, content: dict[str, Any], metadata: dict[str, Any], buffers: list[bytes]
    ) -> tuple[AdmittedComm | None, list[str]]:
        target = content.get("target_name")
        if len(self._models) >= MAX_MODELS:
            return None, [f"a widget past the first {MAX_MODELS:,}"]
        if target == CONTROL_TARGET:
            self._models[comm_id] = None
            return AdmittedComm(content, _plain_metadata(metadata), buffers), []
        if target != WIDGET_TARGET:
            return None, [f"a comm of target {str(target)[:80]!r} (its frontend code is unknown)"]
        data = content.get("data")
        state = data.get("state") if isinstance(data, dict) else None
        if not isinstance(state, dict):
            return None, ["a widget with no state"]
        removed: list[str] = []
        refusal = _refusal(state)
        if refusal is not None:
            return None, [refusal]
        model = _Model(str(state.get("_model_name", "")))
        self._models[comm_id] = model
        assert isinstance(data, dict)
        content["data"] = {**data, "state": self._state(model, dict(state), removed)}
        return AdmittedComm(content, _plain_metadata(metadata), buffers), removed

    def _data(
        self, comm_id: str, data: dict[str, Any], removed: list[str]
    ) -> dict[str, Any] | None:
        """A comm_msg's data: state updates sanitized; None when an update would make the
        model one that is refused."""
        method = data.get("method")
        model = self._models.get(comm_id)
        if model is None:  # the control comm: every model's state at once
            states = data.get("states")
            if method == "update_states" and isinstance(states, dict):
                data["states"] = self._control_states(states, removed)
            return data
        if method in ("update", "echo_update") and isinstance(data.get("state"), dict):
            state = dict(data["state"])
            refusal = _refusal(state)
            if refusal is not None:
                removed.append(refusal)
                return None
            data["state"] = self._state(model, state, removed)
        return data

    def _control_states(self, states: dict[str, Any], removed: list[str]) -> dict[str, Any]:
        kept: dict[str, Any] = {}
        for model_id, entry in states.items():
            if not isinstance(entry, dict) or not isinstance(entry.get("state"), dict):
                continue
            state = {
                "_model_module": entry.get("model_module"),
                "_model_name": entry.get("model_name"),
                **entry["state"],
            }
            refusal = _refusal(state)
            if refusal is not None:
                removed.append(refusal)
                continue
            model = self._models.get(str(model_id)) or _Model(str(entry.get("model_name", "")))
            kept[model_id] = {**entry, "state": self._state(model, dict(entry["state"]), removed)}
        return kept

    def _state(self, model: _Model, state: dict[str, Any], removed: list[str]) -> dict[str, Any]:
        """Every field a frontend renders as HTML, sanitized; `model` follows the state."""
        if model.name in HTML_VALUE_MODELS and isinstance(state.get("value"), str):
            state["value"] = _clean(state["value"], "value", removed)
        if isinstance(state.get("description"), str):
            model.description = state["description"]
        if "description_allow_html" in state:
            model.allow_html = state["description_allow_html"] is True
            if model.allow_html and "description" not in state:  # shown as HTML from now on
                state["description"] = model.description
        if model.allow_html and isinstance(state.get("description"), str):
            state["description"] = _clean(state["description"], "description", removed)
        if model.name == "OutputModel" and isinstance(state.get("outputs"), list):
            state["outputs"] = [self._output(o, removed) for o in state["outputs"]]
        return state

    def _output(self, output: Any, removed: list[str]) -> dict[str, Any]:
        """One of an Output widget's outputs, as a notebook output through the bundle rules."""
        if not isinstance(output, dict):
            return {"output_type": "stream", "name": "stdout", "text": ""}
        kind = output.get("output_type")
        if kind == "stream":
            return {
                "output_type": "stream",
                "name": str(output.get("name")),
                "text": str(output.get("text", "")),
            }
        if kind in ("display_data", "execute_result"):
            shown = self.firewall.bundle(
                output.get("data"), output.get("metadata"), html_note=False
            )
            removed.extend(shown.removed)
            kept = {"output_type": kind, "data": shown.data, "metadata": shown.metadata}
            if kind == "execute_result":
                kept["execution_count"] = output.get("execution_count")
            return kept
        if kind == "error":
            return {
                "output_type": "error",
                "ename": str(output.get("ename", "")),
                "evalue": str(output.get("evalue", "")),
                "traceback": [str(line) for line in output.get("traceback") or []],
            }
        return {"output_type": "stream", "name": "stdout", "text": ""}


def _refusal(state: dict[str, Any]) -> str | None:
    """Why a model with this state is refused, or None."""
    code = sorted(CODE_KEYS & state.keys())
    if code:
        return f"a widget that loads code into the page ({', '.join(code)})"
    for key in ("_model_module", "_view_module"):
        module = state.get(key)
        if key in state and module is not None and module not in ALLOWED_MODULES:
            return f"a widget from {str(module)[:80]!r} (not one of the standard widget modules)"
    return None


def _clean(text: str, field: str, removed: list[str]) -> str:
    cleaned = clean_html(text)
    removed.extend(f"{reason} in a widget's {field}" for reason in cleaned.removed)
    return cleaned.text


def _plain_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """A comm's metadata: ipywidgets sends its protocol version; scalars only."""
    return {str(k): v for k, v in metadata.items() if isinstance(v, str | int | float | bool)}
