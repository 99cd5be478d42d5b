"""A widget model's state made inert for the page, field by field (the kinds are
widget_rules.py's): what one model is (`Model`, which follows its state from message to
message) and `clean_state`, which widgets.py applies to every state it lets out (a comm_open,
an update, the control comm's states).

Must not import: ipykernel, wasmtime.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from sandbox_kernel.kernel.sanitize import clean_html, clean_latex
from sandbox_kernel.kernel.widget_rules import (
    CSS_MODELS,
    IDENTITY_KEYS,
    LINK_MODELS,
    MARKUP_VALUE_MODELS,
    MEDIA_MODELS,
    MODULES,
    PAIRS,
    TYPESET_VALUE_MODELS,
    VERSION_KEYS,
    inert_class_list,
    inert_css_value,
    inert_data_url,
    is_version_range,
    sensitive_fields,
)

__all__ = [
    "CODE_KEYS",
    "Model",
    "clean_state",
    "media_source_is_data_url",
    "model_of",
    "refusal",
]

CODE_KEYS: Final = frozenset({"_esm", "_css", "_anywidget_id"})  # code for the page to load
BLOCKED_FORMAT: Final = "sandbox-blocked"  # a media format that is no URL: a blob of bytes
_FORMAT = re.compile(r"[A-Za-z0-9.+-]{1,40}")
_MODEL_REFERENCE = re.compile(r"IPY_MODEL_([A-Za-z0-9_-]{1,64})")


@dataclass
class Model:
    """One model as the page knows it: its identity (fixed when it opens) and what of its
    state decides how a later field is shown."""

    module: str
    name: str
    view_module: str | None
    view_name: str | None
    description: str = ""  # the raw description, sanitized if it is ever shown as HTML
    allow_html: bool = False
    format: str = ""  # a media model's format as the guest set it
    source_is_data_url: bool = False  # a media model's value, read as a URL, is a data: URL
    page_format: str = ""  # the format the page was last sent


def model_of(state: dict[str, Any]) -> Model:
    """The model a full state (a comm_open's) describes."""
    return Model(
        module=_optional(state.get("_model_module")) or "",
        name=_optional(state.get("_model_name")) or "",
        view_module=_optional(state.get("_view_module")),
        view_name=_optional(state.get("_view_name")),
    )


def refusal(state: dict[str, Any], model: Model | None = None) -> str | None:
    """Why a model with this state (a full one when `model` is None, else an update of
    `model`) is refused, or None."""
    code = sorted(CODE_KEYS & state.keys())
    if code:
        return f"a widget that loads code into the page ({', '.join(code)})"
    for key in ("_model_module", "_view_module"):
        module = state.get(key)
        if module is not None and not (isinstance(module, str) and module in MODULES):
            return f"a widget from {str(module)[:80]!r} (not one of the standard widget modules)"
    for key in ("_model_name", "_view_name"):
        if state.get(key) is not None and not isinstance(state[key], str):
            return f"a widget whose {key} is a {type(state[key]).__name__} (not a name)"
    for key in VERSION_KEYS:
        if key in state and state[key] is not None and not is_version_range(state[key]):
            return f"a widget whose {key} is {str(state[key])[:80]!r} (not a version specifier)"
    if model is not None:
        changed = [k for k in IDENTITY_KEYS if k in state and state[k] != _identity(model, k)]
        if changed:
            return f"an update that changes a widget's {', '.join(changed)}"
        return None
    opened = model_of(state)
    if not allowed_pair(opened):
        view = f"{opened.view_module}/{opened.view_name}"
        return (
            f"a widget {opened.name[:60]!r} shown as {view[:80]!r} "
            "(not a view its package defines for it)"
        )
    return None


def allowed_pair(model: Model) -> bool:
    if model.view_name is None:  # no view: nothing is rendered from it
        return (model.module, model.name, None, None) in PAIRS and (
            model.view_module is None or model.view_module in MODULES
        )
    return (model.module, model.name, model.view_module, model.view_name) in PAIRS


def clean_state(
    model: Model,
    state: dict[str, Any],
    removed: list[str],
    resolve: Callable[[str], Model | None],
    with_value_buffer: bool = False,
) -> dict[str, Any]:
    """`state` with every field the model's view renders made inert; `model` follows it.
    `resolve` names the model of an id (a link's ends); `with_value_buffer`: the message
    carries the model's value as bytes (checked by the caller: `model.source_is_data_url`)."""
    name = model.name
    _plain_fields(name, state, removed)
    _description(model, state, removed)
    if name in MARKUP_VALUE_MODELS and "value" in state:
        state["value"] = _clean(clean_html, _text(state["value"]), "value", removed)
    if name in TYPESET_VALUE_MODELS and "value" in state:
        state["value"] = _clean(clean_latex, _text(state["value"]), "value", removed)
    if name == "MPLCanvasModel":
        _canvas(state, removed)
    elif name in MEDIA_MODELS:
        _media(model, state, removed, with_value_buffer)
    elif name == "ColorsInputModel" and "value" in state:
        state["value"] = [c for c in _list(state["value"]) if c is not None and inert_css_value(c)]
    elif name in LINK_MODELS:
        _link(state, removed, resolve)
    return state


def _plain_fields(name: str, state: dict[str, Any], removed: list[str]) -> None:
    """CSS values, class names and icons, wherever a model has them."""
    for key in list(state):
        value = state[key]
        if name in CSS_MODELS and not key.startswith("_"):
            if not inert_css_value(value):
                removed.append(f"CSS that loads or escapes ({key}) in a widget's style")
                state[key] = None
        elif key == "_dom_classes":
            kept = [c for c in _list(value) if inert_class_list(c) and " " not in c]
            if kept != _list(value):
                removed.append("a class name in a widget's _dom_classes")
            state[key] = kept
        elif key == "icon" and not inert_class_list(value):
            removed.append("a widget's icon")
            state[key] = ""
        elif key == "icons":
            state[key] = [i if inert_class_list(i) else "" for i in _list(value)]
        elif key == "toolitems":
            state[key] = [_tool_item(item) for item in _list(value)]


def _description(model: Model, state: dict[str, Any], removed: list[str]) -> None:
    """A description is typeset (MathJax) always, and written as HTML when allowed: the
    sanitized text goes again when the switch turns it to HTML."""
    if isinstance(state.get("description"), str):
        model.description = state["description"]
    if "description_allow_html" in state:
        # The page reads the switch as JavaScript does: any truthy value is HTML. What
        # passes is a bool, and HTML whenever the page would take it as HTML.
        model.allow_html = js_truthy(state["description_allow_html"])
        state["description_allow_html"] = model.allow_html
        if model.allow_html and "description" not in state:  # shown as HTML from now on
            state["description"] = model.description
    if "description" in state:
        text = _clean(clean_latex, _text(state["description"]), "description", removed)
        if model.allow_html:
            text = _clean(clean_html, text, "description", removed)
        state["description"] = text


def js_truthy(value: Any) -> bool:
    """Whether JavaScript takes a JSON value as true (a list or an object always is)."""
    if isinstance(value, list | tuple | dict):
        return True
    return bool(value) and value == value  # NaN is false


def _canvas(state: dict[str, Any], removed: list[str]) -> None:
    """ipympl's canvas: its cursor is CSS, its saved image an <img>'s source."""
    if "_cursor" in state and not inert_css_value(state["_cursor"]):
        removed.append("CSS that loads or escapes (_cursor) in a figure")
        state["_cursor"] = None
    url = state.get("_data_url")
    if url is not None and not inert_data_url(url):
        removed.append("an image source other than a data: image in a figure")
        state["_data_url"] = None


def _media(model: Model, state: dict[str, Any], removed: list[str], with_buffer: bool) -> None:
    """An Image, Video or Audio: with format 'url' its value is the source the page fetches,
    so the page gets 'url' only while the value is a data: URL of its kind; otherwise a
    format that makes the bytes a blob (nothing fetched)."""
    if "value" in state:  # bytes come as a buffer; a value in the JSON is no image
        del state["value"]
        removed.append("a media widget's value that is not bytes")
    if "format" in state:
        model.format = _text(state["format"])
    if "format" not in state and not with_buffer:
        return
    page_format = model.format if _FORMAT.fullmatch(model.format) else BLOCKED_FORMAT
    if page_format == "url" and not model.source_is_data_url:
        removed.append("a media source other than a data: URL (format='url')")
        page_format = BLOCKED_FORMAT
    if "format" in state or page_format != model.page_format:
        state["format"] = page_format
    model.page_format = page_format


def media_source_is_data_url(model: Model, value: bytes) -> bool:
    family = MEDIA_MODELS[model.name]
    try:
        return inert_data_url(value.decode("utf-8"), family)
    except UnicodeDecodeError:
        return False


def _link(
    state: dict[str, Any], removed: list[str], resolve: Callable[[str], Model | None]
) -> None:
    """A link copies a field between two models in the page: each end must name a field of
    a model this firewall let out, and a field no view renders as markup, CSS or a URL."""
    for key in ("source", "target"):
        if key not in state:
            continue
        end = state[key]
        if not _inert_link_end(end, resolve):
            removed.append(f"a widget link's {key} (a field shown as markup, CSS or a URL)")
            state[key] = None


def _inert_link_end(end: Any, resolve: Callable[[str], Model | None]) -> bool:
    if end is None:
        return True
    if not (isinstance(end, list) and len(end) == 2 and isinstance(end[0], str)):
        return False
    match = _MODEL_REFERENCE.fullmatch(end[0])
    linked = resolve(match[1]) if match else None
    if linked is None or not isinstance(end[1], str):
        return False
    sensitive = sensitive_fields(linked.name)
    return sensitive is not None and end[1] not in sensitive and not end[1].startswith("_")


def _tool_item(item: Any) -> Any:
    """ipympl's toolbar item: [text, tooltip, icon, method]; the icon becomes a class."""
    if isinstance(item, list) and len(item) > 2 and not inert_class_list(item[2]):
        return [*item[:2], "", *item[3:]]
    return item


def _clean(clean: Callable[[str], Any], text: str, field: str, removed: list[str]) -> str:
    cleaned = clean(text)
    removed.extend(f"{reason} in a widget's {field}" for reason in cleaned.removed)
    return str(cleaned.text)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _optional(value: Any) -> str | None:
    return None if value is None else str(value)


def _identity(model: Model, key: str) -> str | None:
    return {
        "_model_module": model.module,
        "_model_name": model.name,
        "_view_module": model.view_module,
        "_view_name": model.view_name,
    }[key]
