"""Sanitizers for guest-produced rich text: HTML, SVG, markdown, LaTeX, CSS and JSON.

The allowlists below are the rules: read them in one screen. HTML and SVG go through nh3 (the
Python binding of Ammonia, an html5ever-based allowlist sanitizer: the browser's own parsing
rules, so mutation-XSS shapes come out as inert text). On top of what Ammonia does:

- No `data-*` attribute ever passes: JupyterLab runs a command named by
  `data-commandlinker-command` when the element is clicked (a terminal, say).
- URLs: links may go to http(s), mailto, fragments and relative paths; an image's source must
  be a data: image. An external image (or CSS `url()`, or a vega data URL) would make the
  user's browser carry data out of a sandbox that has no network.
- CSS, in `<style>` elements (pandas' Styler needs them) and `style` attributes, loses every
  construct that loads or runs something (`url(`, `@import`, `expression(`, bindings) and
  `position: fixed` (an output must not cover JupyterLab's own interface).
- An HTML output's CSS applies to the output alone: it is wrapped in an element with a class of
  its own, `sbx-<digest>`, and every selector of its `<style>` elements is put under that class
  (tinycss2 parses them; only @media and @supports are kept of the at-rules), so
  `.jp-Notebook {display: none}` or `body::after {content: ...}` reaches nothing of the page.
- Element ids get the same `sbx-<digest>-` prefix (and so do the `#id` selectors, fragment links,
  `url(#id)` references and `<label for>` that name them), and `name` attributes go: an id or a
  name would otherwise become a global the page's scripts read (DOM clobbering, CVE-2024-43805;
  JupyterLab strips both). SVG documents are shown in an <img>, a document of their own: their
  ids stay.
- The one form control is a checkbox: every `<input>` becomes `type="checkbox"` whatever it
  said, with no value, name, form or action. A checkbox and its label are how HTML alone folds
  and unfolds (scikit-learn's estimator diagrams); with no form, nothing can submit it.
- Markdown without raw HTML, images or a script-like URL is kept as it is; otherwise it is
  rendered here (markdown-it, CommonMark) and the HTML sanitized: the frontend then never
  parses the raw HTML itself.
- LaTeX loses the MathJax commands that make links, classes, styles or load extensions.

Each function returns the clean text and what it removed, named for a person ("<script>
element", "onerror attribute"); removals that are not a user's concern (comments, SVG
metadata) are not named.

Must not import: anything Jupyter, wasmtime.
"""

from __future__ import annotations

import functools
import hashlib
import html
import re
import threading
from dataclasses import dataclass, field
from typing import Any

import nh3

from sandbox_kernel.kernel.css import clean_css, scoped_css

__all__ = [
    "Cleaned",
    "clean_css",
    "clean_html",
    "clean_latex",
    "clean_markdown",
    "clean_svg",
    "scoped_css",
    "scrub_json",
]

# -- the allowlists --------------------------------------------------------------------------


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


HTML_TAGS = _words(
    """a abbr acronym address article aside b bdi bdo big blockquote br caption center cite
    code col colgroup dd del details dfn div dl dt em figcaption figure font footer h1 h2 h3 h4
    h5 h6 header hgroup hr i img input ins kbd label li main mark nav ol p pre q rp rt ruby s samp
    section small span strike strong style sub summary sup table tbody td tfoot th thead time
    tr tt u ul var wbr"""
)
SVG_TAGS = _words(
    """svg g path rect circle ellipse line polyline polygon text tspan defs clipPath mask
    pattern linearGradient radialGradient stop symbol use marker title desc image style
    switch"""
)
GENERIC_ATTRIBUTES = frozenset({"class", "id", "title", "style", "align", "dir", "lang", "role"})
HTML_ATTRIBUTES: dict[str, set[str]] = {
    "a": {"href", "name"},
    "img": {"src", "alt", "width", "height"},
    "table": {"border", "cellpadding", "cellspacing", "width", "summary"},
    "td": {"colspan", "rowspan", "valign", "width", "headers"},
    # halign: pandas writes it on a MultiIndex's header cells (a word, never a URL or code).
    "th": {"colspan", "rowspan", "valign", "halign", "width", "scope", "headers"},
    "tr": {"valign"},
    "col": {"span", "width"},
    "colgroup": {"span", "width"},
    "ol": {"start", "type", "reversed"},
    "ul": {"type"},
    "li": {"value"},
    "font": {"color", "face", "size"},
    "details": {"open"},
    "input": {"checked", "disabled"},  # and type="checkbox", always (FORCED_ATTRIBUTES)
    "label": {"for"},  # an id of the output's own (prefixed)
    "style": {"type", "scoped"},
    "time": {"datetime"},
    "q": {"cite"},
    "blockquote": {"cite"},
    "del": {"cite", "datetime"},
    "ins": {"cite", "datetime"},
}
SVG_ATTRIBUTES = _words(
    """xmlns xmlns:xlink version width height viewBox preserveAspectRatio x y x1 y1 x2 y2 cx cy
    r rx ry d points transform fill fill-opacity fill-rule stroke stroke-width stroke-opacity
    stroke-linecap stroke-linejoin stroke-dasharray stroke-dashoffset stroke-miterlimit
    opacity clip-path clip-rule clipPathUnits mask font-family font-size font-style
    font-weight text-anchor dominant-baseline alignment-baseline baseline-shift dx dy rotate
    textLength lengthAdjust text-decoration letter-spacing word-spacing xml:space offset
    stop-color stop-opacity gradientUnits gradientTransform spreadMethod fx fy patternUnits
    patternContentUnits patternTransform markerWidth markerHeight markerUnits refX refY orient
    overflow visibility display color href xlink:href"""
)
# Attributes set whatever the markup said.
FORCED_ATTRIBUTES = {"input": {"type": "checkbox"}}
# Removed with their content and never named in a note: not a user's concern.
QUIET_TAGS = frozenset({"metadata"})
DROPPED_WITH_CONTENT = frozenset({"script", "metadata", "template", "noscript"})
LINK_SCHEMES = ("http:", "https:", "mailto:")
IMAGE_DATA = re.compile(r"data:image/(png|jpe?g|gif|webp|bmp|svg\+xml)[;,]", re.IGNORECASE)
# MathJax commands that make links, classes, styles, ids, attributes or tooltips, or load
# extensions and macros: the html extension's (\href \class \cssId \style \data), base's
# \mmlToken (any MathML attribute: [href=...], [class=...]), action's (\mathtip \texttip
# \toggle \actiontype).
_LATEX_BLOCKED = re.compile(
    r"\\(href|url|class|cssId|style|data|htmlData|unicode|require|bbox|attr|mmlToken|mathtip"
    r"|texttip|toggle|actiontype|HTML)(?![A-Za-z])"
)
_SCRIPT_SCHEMES = ("javascript:", "vbscript:", "livescript:", "data:text", "data:application")
_URL_NOISE = re.compile(r"[\x00-\x20\x7f\\]+")  # what browsers and markdown drop from URLs
_URL_REFERENCE = re.compile(r"(url\(\s*['\"]?#)", re.IGNORECASE)
_STYLE_ELEMENT = re.compile(r"(<style\b[^>]*>)(.*?)(</style>)", re.IGNORECASE | re.DOTALL)
_START_TAG = re.compile(r"<([A-Za-z][^\s/>]*)([^>]*)>")
_CHECKBOX = re.compile(r"""\btype\s*=\s*["']?checkbox\b""", re.IGNORECASE)
_ATTRIBUTE = re.compile(r"""([^\s=/>"']+)(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s>]+))?""")


@dataclass
class Cleaned:
    """A sanitizer's answer: the inert text and what was removed (empty when nothing was)."""

    text: str
    removed: list[str] = field(default_factory=list)


# -- URLs ------------------------------------------------------------------------------------


def _normalized_url(value: str) -> str:
    return _URL_NOISE.sub("", html.unescape(value)).lower()


def _is_script_url(value: str) -> bool:
    return _normalized_url(value).startswith(_SCRIPT_SCHEMES)


def _safe_link(value: str) -> bool:
    url = _normalized_url(value)
    scheme = re.match(r"^[a-z][a-z0-9+.-]*:", url)
    return scheme is None or url.startswith(LINK_SCHEMES)


def _safe_image_source(value: str) -> bool:
    return IMAGE_DATA.match(_normalized_url(value)) is not None


# -- HTML and SVG ----------------------------------------------------------------------------


class _Filter:
    """nh3's attribute callback: URL and CSS rules, and a record of what it refused in the
    clean running on this thread (the cleaners are built once and shared)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def start(self, prefix: str | None) -> list[str]:
        """A fresh record for the clean about to run on this thread; `prefix` is put before
        every id (None: ids are kept, as in an SVG document)."""
        self._local.refused = []
        self._local.prefix = prefix
        return self.refused

    @property
    def refused(self) -> list[str]:
        refused: list[str] = self._local.refused
        return refused

    def __call__(self, tag: str, attribute: str, value: str) -> str | None:
        name = attribute.lower()
        prefix: str | None = self._local.prefix
        if name == "style":
            return clean_css(value, self.refused)
        if name in ("id", "name"):
            return self._named(name, value, prefix)
        if name == "for":  # a label's: names an id, which carries the prefix
            return value if prefix is None else prefix + value
        if prefix is not None and "url(" in value:
            value = _URL_REFERENCE.sub(lambda m: m[1] + prefix, value)  # url(#clip) in SVG
        if name in ("href", "xlink:href"):
            return self._link(tag, attribute, value, prefix)
        if name == "src":
            if _safe_image_source(value):
                return value
            self.refused.append(f"src {_describe_url(value)} (images must be data: images)")
            return None
        return value

    def _named(self, name: str, value: str, prefix: str | None) -> str | None:
        """An id gets the output's prefix, never one of the page's globals; a name goes (an
        SVG document, shown in an <img>, keeps its ids but not JupyterLab's own)."""
        if prefix is not None:
            if name == "name":
                self.refused.append("name attribute")
                return None
            return prefix + value
        if name == "id" and value.lower().startswith(("jp-", "jupyter")):
            self.refused.append(f"id {value[:40]!r}")
            return None
        return value

    def _link(self, tag: str, attribute: str, value: str, prefix: str | None) -> str | None:
        if prefix is not None and value.startswith("#"):
            return "#" + prefix + value[1:]  # the fragment follows its renamed id
        if tag == "a" and _safe_link(value):
            return value
        if tag != "a" and (value.startswith("#") or _safe_image_source(value)):
            return value
        self.refused.append(f"{attribute} {_describe_url(value)}")
        return None


def _describe_url(value: str) -> str:
    url = _normalized_url(value)
    scheme = re.match(r"^[a-z][a-z0-9+.-]*:", url)
    return f"{scheme.group()} URL" if scheme else "URL"


_FILTER = _Filter()


@functools.cache
def _cleaner(svg: bool) -> nh3.Cleaner:
    """Built once per kind: building one costs more than most cleans."""
    tags = (SVG_TAGS | {"style"}) if svg else (HTML_TAGS | SVG_TAGS)
    attributes: dict[str, set[str]] = {"*": set(GENERIC_ATTRIBUTES)}
    for tag in SVG_TAGS:
        attributes[tag] = set(SVG_ATTRIBUTES)
    for tag, names in HTML_ATTRIBUTES.items():
        if tag in tags:
            attributes[tag] = attributes.get(tag, set()) | names
    return nh3.Cleaner(
        tags=set(tags),
        clean_content_tags=set(DROPPED_WITH_CONTENT),
        attributes=attributes,
        attribute_filter=_FILTER,
        set_tag_attribute_values=FORCED_ATTRIBUTES,
        strip_comments=True,
        link_rel=None,
        url_schemes={"http", "https", "mailto", "data"},
    )


def clean_html(text: str) -> Cleaned:
    """An HTML fragment with only allowlisted tags, attributes, URLs and CSS left, and its
    text without MathJax's link, style and attribute commands (JupyterLab typesets the math
    in an HTML output, as in markdown)."""
    html_ = _clean_markup(text, svg=False)
    latex = clean_latex(html_.text)
    return Cleaned(latex.text, [*html_.removed, *latex.removed]) if latex.removed else html_


def clean_svg(text: str) -> Cleaned:
    """An SVG document as an inert SVG fragment (no script, handlers, foreignObject, links)."""
    return _clean_markup(text, svg=True)


def _clean_markup(text: str, svg: bool) -> Cleaned:
    scope = None if svg else "sbx-" + hashlib.sha256(text.encode()).hexdigest()[:10]
    record = _FILTER.start(None if scope is None else scope + "-")
    cleaned = _cleaner(svg).clean(text)
    styled = False

    def restyle(match: re.Match[str]) -> str:
        # Ammonia serializes a kept <style> as <style ...>raw text</style>: its CSS is
        # filtered here, and (HTML) confined to the output.
        nonlocal styled
        styled = True
        css = clean_css(match[2], record)
        return match[1] + (css if scope is None else scoped_css(css, scope, record)) + match[3]

    cleaned = _STYLE_ELEMENT.sub(restyle, cleaned)
    if styled and scope is not None:
        cleaned = f'<div class="{scope}">{cleaned}</div>'
    removed: list[str] = []
    if cleaned != text:
        refused = list(dict.fromkeys(record))
        said = {entry.split()[0] for entry in refused}  # "src ..." already says why src went
        missing = [r for r in _missing_parts(text, cleaned) if r.split()[0] not in said]
        removed = missing + _converted_inputs(text) + refused
    if svg:  # an XML document again (an <img> shows it): SVG 2 href, no HTML-only entity
        cleaned = cleaned.replace(" xlink:href=", " href=").replace("&nbsp;", "&#160;")
    return Cleaned(cleaned, removed)


def _parts(text: str) -> tuple[set[str], set[str]]:
    """The tags and attribute names a fragment uses, roughly: only to name what the sanitizer
    removed (the sanitizing itself is Ammonia's)."""
    tags: set[str] = set()
    attributes: set[str] = set()
    for match in _START_TAG.finditer(text):
        tags.add(match[1].lower())
        attributes.update(name.lower() for name in _ATTRIBUTE.findall(match[2]))
    return tags, attributes


def _converted_inputs(text: str) -> list[str]:
    """A note when some <input> was not a checkbox (it is shown as one)."""
    for match in _START_TAG.finditer(text):
        if match[1].lower() == "input" and not _CHECKBOX.search(match[2]):
            return ["<input> other than a checkbox (shown as one)"]
    return []


def _missing_parts(before: str, after: str) -> list[str]:
    """Tags and attributes in `before` but not in `after`; namespaced ones (SVG metadata's
    rdf:, dc:, xmlns:) are not a user's concern."""
    (old_tags, old_attributes), (new_tags, new_attributes) = _parts(before), _parts(after)
    tags = sorted(t for t in old_tags - new_tags - QUIET_TAGS if ":" not in t)
    gone = old_attributes - new_attributes
    attributes = sorted(a for a in gone if ":" not in a or a.startswith("xlink:"))
    return [f"<{t}> element" for t in tags] + [f"{a} attribute" for a in attributes]


# -- markdown --------------------------------------------------------------------------------

_MATH = re.compile(
    r"\$\$.+?\$\$|\\\[.+?\\\]|\\\(.+?\\\)|(?<![\\$])\$(?!\s)[^$\n]+?(?<![\s\\])\$",
    re.DOTALL,
)


def clean_markdown(text: str) -> tuple[str, Cleaned]:
    """(MIME type, cleaned text): plain markdown stays text/markdown as it is; markdown with raw
    HTML, images or a script-like URL becomes sanitized text/html (math kept for MathJax)."""
    latex = clean_latex(text)  # MathJax typesets a markdown output's math
    if latex.removed:
        mime, cleaned = clean_markdown(latex.text)
        return mime, Cleaned(cleaned.text, [*latex.removed, *cleaned.removed])
    if "<" not in text and "![" not in text and not _has_script_url(text):
        return "text/markdown", Cleaned(text)
    maths: list[str] = []

    def hold(match: re.Match[str]) -> str:
        maths.append(match.group())
        return f"SANDBOXMATH{len(maths) - 1}X"

    held = _MATH.sub(hold, text)
    page = _markdown_renderer().render(held)
    cleaned = clean_html(page)
    restored = re.sub(
        r"SANDBOXMATH(\d+)X", lambda m: html.escape(maths[int(m[1])], quote=False), cleaned.text
    )
    removed = list(cleaned.removed)
    if _has_script_url(text):
        removed.append("script URL")
    return "text/html", Cleaned(restored, removed)


@functools.cache
def _markdown_renderer() -> Any:
    """CommonMark with tables and strikethrough; imported and built on first need."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


def _has_script_url(text: str) -> bool:
    flat = _normalized_url(text)
    return any(scheme in flat for scheme in _SCRIPT_SCHEMES)


# -- LaTeX -----------------------------------------------------------------------------------


def clean_latex(text: str) -> Cleaned:
    """LaTeX without MathJax's link, class, style, id and extension-loading commands."""
    found = sorted({f"\\{m[1]}" for m in _LATEX_BLOCKED.finditer(text)})
    if not found:
        return Cleaned(text)
    return Cleaned(_LATEX_BLOCKED.sub(r"\\sandboxremoved", text), [f"{c} command" for c in found])


# -- JSON ------------------------------------------------------------------------------------


def scrub_json(value: Any, external: bool = False) -> tuple[Any, list[str]]:
    """JSON data with script URLs emptied (and, with `external`, absolute URLs too: a vega or
    plotly spec would otherwise make the browser fetch them)."""
    removed: list[str] = []

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            if _is_script_url(node) or (external and _is_external(node)):
                removed.append(_describe_url(node))
                return ""
            return node
        if isinstance(node, list):
            return [walk(item) for item in node]
        if isinstance(node, dict):
            return {key: walk(item) for key, item in node.items()}
        return node

    clean = walk(value)
    return clean, sorted(set(removed))


def _is_external(value: str) -> bool:
    url = _normalized_url(value)
    return url.startswith(("http:", "https:", "ftp:", "//", "file:", "ws:", "wss:"))
