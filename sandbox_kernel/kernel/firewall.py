"""The output firewall: the one seam every guest-produced rich output passes before it leaves.

JupyterLab renders a live session's outputs as trusted: an HTML output's script runs in the
page with the user's credentials (and can open a terminal on the host through the server's
REST API), and a saved notebook is signed trusted and runs it again on every reopen. So, by
default (untrusted), each MIME bundle the guest produces (execute_result, display_data,
update_display_data, payloads, user_expressions, inspect replies) is reduced to:

    text/plain                             kept
    text/html, image/svg+xml               sanitized (sanitize.py: nh3 under an allowlist)
    text/markdown                          kept, or rendered and sanitized when it holds HTML
    text/latex                             MathJax's link/style/extension commands removed
    image/png, jpeg, gif, webp, bmp        kept when they are base64 text
    application/json, geo+json,            kept, with script URLs emptied
      vnd.dataresource+json
    vega, vega-lite, plotly JSON           kept, with script and absolute URLs emptied
    widget-view+json                       kept: a model's id and version (the model's own
                                           state passes widgets.py's rules on its comm)
    anything else                          dropped: javascript and its aliases, bokeh and
                                           holoviews "exec" types, unknown types

and metadata to the keys frontends use for layout. Every item is capped at the policy's
`display_max_bytes` in both modes. What was removed is named in `Shown.removed`, and the user
is told: when all of it came out of the bundle's HTML (a scikit-learn estimator's script and
copy buttons, a table's onclick), in a line under that HTML, where the removal is seen, and
outside the wrapper that confines the output's own CSS (sanitize.py), so no selector of
the output's can reach it; otherwise on stderr (Shown.note), as a text client shows it too.
`trust_outputs = true` in the policy (never in the guarded spec) passes bundles unchanged but
for the caps.

Must not import: ipykernel (contents are built by messages.py from what this returns).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from sandbox_kernel.kernel.sanitize import (
    Cleaned,
    clean_html,
    clean_latex,
    clean_markdown,
    clean_svg,
    scrub_json,
)

__all__ = ["DEFAULT_MAX_BYTES", "OutputFirewall", "Shown", "removal_note"]

DEFAULT_MAX_BYTES = 10_000_000
MAX_METADATA_BYTES = 64 * 1024
MAX_COMPLETIONS = 2_000
MAX_COMPLETION_CHARS = 1_000
MAX_ERROR_CHARS = 100_000
MAX_DISPLAY_ID_CHARS = 256  # IPython makes 32 hex digits; a longer one is not its
# Layout keys of per-MIME metadata that frontends read; anything else is dropped.
METADATA_KEYS = frozenset({"width", "height", "unconfined", "needs_background", "expanded"})
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
_WIDGET_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_VEGA_OR_PLOTLY = re.compile(r"application/vnd\.(vega(lite)?\.v\d+(\.\d+)*|plotly\.v\d+)\+json")
_IMAGES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp"})
_JSON = frozenset({"application/json", "application/geo+json", "application/vnd.dataresource+json"})
_PAYLOADS = frozenset({"page", "set_next_input", "ask_exit"})
_COMPLETION_KEYS = frozenset({"text", "type", "signature", "start", "end"})


class Shown(BaseModel):
    """A bundle as it may leave the kernel: only the firewall makes these."""

    model_config = ConfigDict(frozen=True)

    data: dict[str, Any]
    metadata: dict[str, Any]
    removed: tuple[str, ...] = ()
    in_html: bool = False  # the note on what was removed is in data["text/html"]

    @property
    def note(self) -> str | None:
        """One stderr line for the user when something was removed; None when nothing was,
        or when the HTML says it."""
        return removal_note(self.removed) if self.removed and not self.in_html else None


def removal_note(removed: tuple[str, ...]) -> str:
    """The stderr line that says what the firewall removed (from a bundle or payloads)."""
    listed = "; ".join(removed[:8]) + ("; ..." if len(removed) > 8 else "")
    return (
        f"[sandbox] the output firewall removed from this output: {listed} "
        "(see 'Outputs' in the README; trust_outputs = true in the policy shows outputs "
        "unchanged)\n"
    )


def _html_note(removed: tuple[str, ...]) -> str:
    """The same note as a line of HTML, escaped (the names come from the guest's markup)."""
    text = html.escape(removal_note(removed).strip())
    return f'<div class="sandbox-kernel-note"><small>{text}</small></div>'


class OutputFirewall:
    """Applies the rules above; one per kernel, `trusted` from the policy."""

    def __init__(self, trusted: bool = False, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.trusted = trusted
        self.max_bytes = max_bytes

    # -- bundles -----------------------------------------------------------------------------

    def bundle(self, data: object, metadata: object = None, html_note: bool = True) -> Shown:
        """The bundle (data, metadata) reduced to what may be shown. With `html_note`, a note
        on what was removed from the HTML alone goes under that HTML (see the top)."""
        removed: list[str] = []
        kept: dict[str, Any] = {}
        for mime, value in (data if isinstance(data, dict) else {}).items():
            name = str(mime)
            size = _size(value)
            if size > self.max_bytes:
                removed.append(f"{name} ({size:,} bytes, over the cap of {self.max_bytes:,})")
            elif self.trusted:
                kept[name] = value
            else:
                self._admit(name, value, kept, removed)
        found = tuple(removed)
        in_html = html_note and _from_html_alone(found, kept)
        if in_html:
            kept["text/html"] += _html_note(found)
        metadata = self._metadata(metadata, kept)
        return Shown(data=kept, metadata=metadata, removed=found, in_html=in_html)

    def _admit(self, mime: str, value: Any, kept: dict[str, Any], removed: list[str]) -> None:
        base = mime.split(";")[0].strip().lower()
        rule = _rule(base)
        if rule is None:
            removed.append(f"{mime} (not shown by this sandbox: it could run code)")
            return
        try:
            outcome = rule(value)
        except RecursionError:  # nested past what can be checked: refused, not passed
            outcome = None
        if outcome is None:
            removed.append(f"{mime} (malformed)")
            return
        target, cleaned, reasons = outcome
        target = target or base
        if target != base and target in kept:
            return  # rendered markdown never overwrites the bundle's own HTML
        kept[target] = cleaned  # (and the bundle's own HTML, coming later, replaces it)
        removed.extend(f"{reason} in {base}" for reason in reasons)

    def _metadata(self, metadata: object, kept: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(metadata, dict) or _size(metadata) > MAX_METADATA_BYTES:
            return {}
        if self.trusted:
            return metadata
        out: dict[str, Any] = {}
        for key, value in metadata.items():
            if key in kept and isinstance(value, dict):
                out[key] = {k: v for k, v in value.items() if k in METADATA_KEYS and _scalar(v)}
            elif "/" not in str(key) and _scalar(value):
                out[str(key)] = value
        return out

    # -- replies and payloads ----------------------------------------------------------------

    def payloads(self, payloads: object) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
        """Guest-produced execute_reply payloads: pages through `bundle`, the rest capped."""
        out: list[dict[str, Any]] = []
        removed: list[str] = []
        for item in payloads if isinstance(payloads, list) else []:
            source = item.get("source") if isinstance(item, dict) else None
            if source not in _PAYLOADS:
                removed.append(f"payload {str(source)[:40]!r}")
            elif source == "page":
                shown = self.bundle(item.get("data"), None, html_note=False)
                removed.extend(shown.removed)
                out.append({"source": "page", "data": shown.data, "start": _int(item.get("start"))})
            elif source == "set_next_input":
                text = _text(item.get("text"), self.max_bytes)
                out.append({"source": source, "text": text, "replace": bool(item.get("replace"))})
            else:
                out.append({"source": "ask_exit", "keepkernel": bool(item.get("keepkernel"))})
        return out, tuple(removed)

    def transient(self, transient: object) -> dict[str, Any]:
        """A display's transient part: only a display_id, a short string."""
        found = transient.get("display_id") if isinstance(transient, dict) else None
        if isinstance(found, str) and 0 < len(found) <= MAX_DISPLAY_ID_CHARS:
            return {"display_id": found}
        return {}

    def inspect_reply(self, reply: object) -> dict[str, Any]:
        """inspect_reply content from the guest's answer; a note in text/plain if cut."""
        if not isinstance(reply, dict) or not reply.get("found"):
            return {"status": "ok", "found": False, "data": {}, "metadata": {}}
        shown = self.bundle(reply.get("data"), reply.get("metadata"), html_note=False)
        return {"status": "ok", "found": True, **_with_note(shown)}

    def user_expression(self, data: object, metadata: object = None) -> dict[str, Any]:
        """One ok user_expressions entry; a note in text/plain if something was removed."""
        return {"status": "ok", **_with_note(self.bundle(data, metadata, html_note=False))}

    def user_expression_answer(self, answer: object) -> dict[str, Any]:
        """One user_expressions entry from the guest's answer, ok or error, capped."""
        entry = answer if isinstance(answer, dict) else {}
        if entry.get("status") == "ok":
            return self.user_expression(entry.get("data"), entry.get("metadata"))
        return {
            "status": "error",
            "ename": _text(entry.get("ename"), MAX_COMPLETION_CHARS) or "Error",
            "evalue": _text(entry.get("evalue"), MAX_ERROR_CHARS),
            "traceback": [],
        }

    def complete_reply(self, reply: object, cursor_pos: int) -> dict[str, Any]:
        """complete_reply content from the guest's answer: matches capped in count and size."""
        answer = reply if isinstance(reply, dict) else {}
        matches = answer.get("matches")
        metadata = answer.get("metadata")
        types = metadata.get("_jupyter_types_experimental") if isinstance(metadata, dict) else None
        out: dict[str, Any] = {
            "status": "ok",
            "matches": [_text(m, MAX_COMPLETION_CHARS) for m in _items(matches) if _str(m)],
            "cursor_start": _int(answer.get("cursor_start"), cursor_pos),
            "cursor_end": _int(answer.get("cursor_end"), cursor_pos),
            "metadata": {},
        }
        if types is not None:
            out["metadata"]["_jupyter_types_experimental"] = [
                {key: _field(value) for key, value in kind.items() if key in _COMPLETION_KEYS}
                for kind in _items(types)
                if isinstance(kind, dict)
            ]
        return out


# -- rules -------------------------------------------------------------------------------------

Rule = Callable[[Any], "tuple[str, Any, list[str]] | None"]


def _rule(mime: str) -> Rule | None:
    if mime in _RULES:
        return _RULES[mime]
    if mime in _IMAGES:
        return _image
    if mime in _JSON:
        return _json
    if _VEGA_OR_PLOTLY.fullmatch(mime):
        return _spec
    return None


def _markup(mime: str, clean: Callable[[str], Cleaned]) -> Rule:
    def rule(value: Any) -> tuple[str, Any, list[str]] | None:
        if not isinstance(value, str):
            return None
        cleaned = clean(value)
        return mime, cleaned.text, cleaned.removed

    return rule


def _plain(value: Any) -> tuple[str, Any, list[str]] | None:
    return ("text/plain", value, []) if isinstance(value, str) else None


def _markdown(value: Any) -> tuple[str, Any, list[str]] | None:
    if not isinstance(value, str):
        return None
    mime, cleaned = clean_markdown(value)
    return mime, cleaned.text, cleaned.removed


def _image(value: Any) -> tuple[str, Any, list[str]] | None:
    if isinstance(value, str) and _BASE64.fullmatch(value):
        return "", value, []
    return None


def _json(value: Any) -> tuple[str, Any, list[str]] | None:
    clean, removed = scrub_json(value)
    return "", clean, removed


def _spec(value: Any) -> tuple[str, Any, list[str]] | None:
    clean, removed = scrub_json(value, external=True)
    return "", clean, removed


def _widget_view(value: Any) -> tuple[str, Any, list[str]] | None:
    """A widget's view: the model's id and the protocol version, nothing else (the model
    itself passed widgets.py's rules on its comm)."""
    if not isinstance(value, dict) or not isinstance(value.get("model_id"), str):
        return None
    if not _WIDGET_ID.fullmatch(value["model_id"]):
        return None
    view = {"model_id": value["model_id"]}
    for key in ("version_major", "version_minor"):
        if isinstance(value.get(key), int):
            view[key] = value[key]
    return "", view, []


_RULES: dict[str, Rule] = {
    "text/plain": _plain,
    "application/vnd.jupyter.widget-view+json": _widget_view,
    "text/html": _markup("text/html", clean_html),
    "image/svg+xml": _markup("image/svg+xml", clean_svg),
    "text/latex": _markup("text/latex", clean_latex),
    "text/markdown": _markdown,
}


# -- helpers -----------------------------------------------------------------------------------


def _size(value: object) -> int:
    if isinstance(value, str):
        return len(value)
    try:
        return len(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError, RecursionError):
        return 0


def _scalar(value: object) -> bool:
    return value is None or isinstance(value, bool | int | float | str)


def _int(value: object, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _text(value: object, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _str(value: object) -> bool:
    return isinstance(value, str)


def _items(value: object) -> list[Any]:
    return value[:MAX_COMPLETIONS] if isinstance(value, list) else []


def _field(value: object) -> str | int:
    return _text(value, MAX_COMPLETION_CHARS) if isinstance(value, str) else _int(value)


def _from_html_alone(removed: tuple[str, ...], kept: dict[str, Any]) -> bool:
    """True when something was removed, all of it from the text/html that was kept."""
    html_kept = isinstance(kept.get("text/html"), str)
    return html_kept and bool(removed) and all(r.endswith(" in text/html") for r in removed)


def _with_note(shown: Shown) -> dict[str, Any]:
    data = dict(shown.data)
    if shown.note:
        data["text/plain"] = str(data.get("text/plain", "")) + "\n" + shown.note
    return {"data": data, "metadata": shown.metadata}
