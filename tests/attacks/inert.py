"""What "inert" means for an output that left the kernel, checked with html5lib (a WHATWG
parser, independent of the sanitizer): nothing in it could run script, load a resource, or
drive JupyterLab, whatever frontend renders it.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

import html5lib

__all__ = ["ALLOWED_MIME_TYPES", "assert_inert_bundle", "assert_inert_html"]

ALLOWED_MIME_TYPES = re.compile(
    r"text/(plain|html|markdown|latex)|image/(png|jpeg|gif|webp|bmp|svg\+xml)"
    r"|application/(json|geo\+json|vnd\.dataresource\+json)"
    r"|application/vnd\.(vega(lite)?\.v\d+(\.\d+)*|plotly\.v\d+)\+json"
    r"|application/vnd\.jupyter\.widget-view\+json"  # a model id (its model is widgets.py's)
)
FORBIDDEN_ELEMENTS = frozenset(
    [
        "script",
        "iframe",
        "frame",
        "frameset",
        "object",
        "embed",
        "applet",
        "base",
        "meta",
        "link",
        "form",
        "button",
        "textarea",
        "select",
        "foreignobject",
        "animate",
        "set",
        "animatemotion",
        "animatetransform",
        "portal",
        "noscript",
        "template",
    ]
)
INPUT_ATTRIBUTES = frozenset({"type", "checked", "disabled", "id", "class", "style", "title"})
URL_ATTRIBUTES = frozenset({"href", "src", "xlink:href", "action", "formaction", "data", "poster"})
_NOISE = re.compile(r"[\x00-\x20\x7f\\]+")


def _url(value: str) -> str:
    return _NOISE.sub("", html.unescape(value)).lower()


def assert_inert_html(markup: str, where: str = "") -> None:
    tree = html5lib.parseFragment(markup, treebuilder="etree", namespaceHTMLElements=False)
    for element in tree.iter():
        if not isinstance(element.tag, str):
            continue  # a comment
        tag = element.tag.rsplit("}", 1)[-1].lower()
        assert tag not in FORBIDDEN_ELEMENTS, f"{where}: <{tag}> survived in {markup[:300]!r}"
        for raw_name, value in element.attrib.items():
            name = raw_name.rsplit("}", 1)[-1].lower()
            assert not name.startswith("on"), f"{where}: handler {name} in {markup[:300]!r}"
            assert not name.startswith("data-"), f"{where}: {name} in {markup[:300]!r}"
            assert name not in ("srcdoc", "srcset", "background"), f"{where}: {name}"
            if name in URL_ATTRIBUTES:
                url = _url(value)
                assert not url.startswith(("javascript:", "vbscript:", "data:text")), url
                if name == "src" or (name in ("href", "xlink:href") and tag != "a"):
                    assert url.startswith(("data:image/", "#")), f"{where}: {name}={url[:80]}"
            if name == "style":
                _assert_inert_css(value, where)
        if tag == "style":
            _assert_inert_css(element.text or "", where)
        if tag == "input":  # a checkbox, bound to no form: it can fold, never submit or ask
            assert element.attrib.get("type") == "checkbox", f"{where}: {element.attrib}"
            assert set(element.attrib) <= INPUT_ATTRIBUTES, f"{where}: {element.attrib}"
        if tag == "label" and "for" in element.attrib:  # only for the output's own controls
            assert element.attrib["for"].startswith("sbx-"), f"{where}: {element.attrib}"


def _assert_inert_css(css: str, where: str) -> None:
    flat = css.replace("\\", "").lower()
    for construct in ("url(", "@import", "expression(", "javascript:", "position:fixed"):
        assert construct not in flat.replace(" ", ""), f"{where}: CSS {construct} in {css[:200]!r}"


def assert_inert_bundle(data: dict[str, Any], where: str = "") -> None:
    for mime, value in data.items():
        assert ALLOWED_MIME_TYPES.fullmatch(mime), f"{where}: MIME type {mime!r} was sent"
        if mime in ("text/html", "image/svg+xml"):
            assert_inert_html(value, f"{where} {mime}")
        elif mime == "text/markdown":
            assert "<" not in value, f"{where}: raw HTML left in markdown: {value[:200]!r}"
            assert "javascript:" not in _url(value), f"{where}: script URL in markdown"
        elif mime == "text/latex":
            assert "\\href" not in value and "\\url" not in value, f"{where}: {value[:200]!r}"
        elif mime.startswith("application/"):
            text = json.dumps(value).lower()
            assert "javascript:" not in text, f"{where}: script URL in {mime}"
            if mime == "application/vnd.jupyter.widget-view+json":
                assert set(value) <= {"model_id", "version_major", "version_minor"}, where
                assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", value["model_id"]), where
            if "vega" in mime or "plotly" in mime:
                assert "http:" not in text and "https:" not in text, f"{where}: URL in {mime}"
