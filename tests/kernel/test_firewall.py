"""The output firewall's rules, on the host (no guest): MIME types, sanitizers, metadata,
payloads, replies, caps and the trusted mode. What leaves a real kernel is checked in
tests/attacks/test_output_firewall.py, and in a real browser in test_browser.py.
"""

from __future__ import annotations

import re

import pytest

from sandbox_kernel.kernel.firewall import OutputFirewall
from sandbox_kernel.kernel.sanitize import clean_css, clean_html, clean_markdown, clean_svg
from tests.attacks.inert import assert_inert_bundle

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9aw"
    "AAAABJRU5ErkJggg=="
)


@pytest.fixture
def firewall() -> OutputFirewall:
    return OutputFirewall()


@pytest.mark.parametrize(
    "mime",
    [
        "application/javascript",
        "text/javascript",
        "application/x-javascript",
        "application/vnd.jupyter.widget-view+json",
        "application/vnd.bokehjs_exec.v0+json",
        "application/vnd.holoviews_exec.v0+json",
        "application/pdf",
        "text/x-unknown",
    ],
)
def test_executable_and_unknown_types_are_dropped(firewall: OutputFirewall, mime: str) -> None:
    shown = firewall.bundle({mime: "x()", "text/plain": "plain"})
    assert shown.data == {"text/plain": "plain"}
    assert shown.removed and mime in shown.removed[0]
    assert shown.note is not None and mime in shown.note


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"text/plain": "x"}, {"text/plain": "x"}),
        ({"image/png": PNG}, {"image/png": PNG}),
        ({"application/json": {"a": [1, 2]}}, {"application/json": {"a": [1, 2]}}),
        ({"text/markdown": "**b** $x_1$"}, {"text/markdown": "**b** $x_1$"}),
        ({"text/latex": "$\\frac{1}{2}$"}, {"text/latex": "$\\frac{1}{2}$"}),
        ({"text/html": "<b>b</b><table><tr><td>1</td></tr></table>"}, None),
    ],
    ids=["plain", "png", "json", "markdown", "latex", "html"],
)
def test_ordinary_output_passes_without_a_note(
    firewall: OutputFirewall, data: dict[str, object], expected: dict[str, object] | None
) -> None:
    shown = firewall.bundle(data)
    assert shown.removed == ()
    assert shown.note is None
    if expected is not None:
        assert shown.data == expected


NOTE_CLASS = '<div class="sandbox-kernel-note">'


def test_what_came_out_of_the_html_alone_is_said_under_it(firewall: OutputFirewall) -> None:
    """A script or handler removed from an HTML output is named in a line under that HTML,
    escaped, outside the wrapper that scopes the output's CSS, and not on stderr."""
    html = "<style>div { color: red }</style><b>kept</b><script>x()</script>"
    shown = firewall.bundle({"text/html": html, "text/plain": "Model()"})
    page = shown.data["text/html"]
    wrapper_end = page.index("</div>")
    assert page.index(NOTE_CLASS) > wrapper_end, page  # after the scoped output, not in it
    assert page.endswith("</small></div>") and "&lt;script&gt; element in text/html" in page
    assert shown.note is None and shown.in_html
    assert shown.removed == ("<script> element in text/html",)
    assert shown.data["text/plain"] == "Model()"  # a text client sees the object, no note


@pytest.mark.parametrize(
    "data",
    [
        {"text/html": "<b>b</b><script>x()</script>", "application/javascript": "x()"},
        {"text/html": "<b>b</b><script>x()</script>", "image/png": "<not base64>"},
        {"text/markdown": "<b onclick=x()>md</b>"},
    ],
    ids=["and-javascript", "and-a-bad-image", "markdown"],
)
def test_anything_removed_elsewhere_keeps_the_note_on_stderr(
    firewall: OutputFirewall, data: dict[str, object]
) -> None:
    shown = firewall.bundle(data)
    assert shown.note is not None and not shown.in_html
    assert NOTE_CLASS not in str(shown.data.get("text/html", ""))


def test_the_html_note_can_be_turned_off(firewall: OutputFirewall) -> None:
    """Pages, inspection and user expressions keep theirs in text/plain or on stderr."""
    shown = firewall.bundle({"text/html": "<b>b</b><script>x()</script>"}, html_note=False)
    assert shown.data == {"text/html": "<b>b</b>"} and shown.note is not None
    expression = firewall.user_expression({"text/html": "<i onclick=x()>i</i>"})
    assert NOTE_CLASS not in expression["data"]["text/html"]
    assert "the output firewall removed" in expression["data"]["text/plain"]


def test_images_must_be_base64_text(firewall: OutputFirewall) -> None:
    shown = firewall.bundle({"image/png": "<svg onload=x()>", "image/jpeg": 12})
    assert shown.data == {}
    assert len(shown.removed) == 2


def test_markdown_with_raw_html_becomes_sanitized_html(firewall: OutputFirewall) -> None:
    shown = firewall.bundle({"text/markdown": "# T\n<img src=x onerror=y()> $a<b$"})
    assert list(shown.data) == ["text/html"]
    html = shown.data["text/html"]
    assert "<h1>T</h1>" in html and "onerror" not in html
    assert "$a&lt;b$" in html  # the math is left for MathJax, escaped as text
    assert_inert_bundle(shown.data)


def test_rendered_markdown_never_replaces_the_bundles_own_html(firewall: OutputFirewall) -> None:
    shown = firewall.bundle({"text/html": "<i>own</i>", "text/markdown": "<b>md</b>"})
    assert shown.data == {"text/html": "<i>own</i>"}


def test_markdown_images_and_script_links_are_caught() -> None:
    mime, cleaned = clean_markdown("![x](http://127.0.0.1:9/leak) [y](JaVa\tScRiPt:z())")
    assert mime == "text/html"
    assert "127.0.0.1" not in cleaned.text and "script URL" in cleaned.removed


def test_vega_and_plotly_lose_external_and_script_urls(firewall: OutputFirewall) -> None:
    spec = {"data": {"url": "https://e.example/x.csv"}, "href": "javascript:x()", "mark": "bar"}
    shown = firewall.bundle({"application/vnd.vegalite.v5+json": spec})
    assert shown.data["application/vnd.vegalite.v5+json"] == {
        "data": {"url": ""},
        "href": "",
        "mark": "bar",
    }
    plotly = firewall.bundle({"application/vnd.plotly.v1+json": {"src": "//e.example/i.png"}})
    assert plotly.data["application/vnd.plotly.v1+json"] == {"src": ""}


def test_metadata_keeps_only_layout_keys(firewall: OutputFirewall) -> None:
    shown = firewall.bundle(
        {"image/png": PNG, "text/html": "<b>x</b>"},
        {
            "image/png": {"width": 10, "height": 20, "onload": "x()"},
            "text/html": {"isolated": True},
            "application/vnd.vegalite.v5+json": {"embed_options": {"loader": "x"}},
            "tags": "ok",
            "nested": {"deep": 1},
        },
    )
    assert shown.metadata == {
        "image/png": {"width": 10, "height": 20},
        "text/html": {},
        "tags": "ok",
    }


def test_every_item_is_capped_in_both_modes() -> None:
    for trusted in (False, True):
        firewall = OutputFirewall(trusted=trusted, max_bytes=100)
        shown = firewall.bundle({"text/plain": "x" * 101, "text/html": "<b>ok</b>"})
        assert list(shown.data) == ["text/html"]
        assert "101 bytes, over the cap of 100" in shown.removed[0]


def test_trusted_mode_passes_bundles_unchanged() -> None:
    bundle = {"application/javascript": "x()", "text/html": "<script>y()</script>"}
    metadata = {"application/javascript": {"anything": True}}
    shown = OutputFirewall(trusted=True).bundle(bundle, metadata)
    assert shown.data == bundle and shown.metadata == metadata and shown.removed == ()


def test_deeply_nested_json_is_refused_not_raised(firewall: OutputFirewall) -> None:
    nested: list[object] = []
    for _ in range(100_000):
        nested = [nested]
    shown = firewall.bundle({"application/json": nested, "text/plain": "deep"})
    assert shown.data == {"text/plain": "deep"}


def test_payloads_pages_pass_the_firewall_and_unknown_sources_go(firewall: OutputFirewall) -> None:
    payloads, removed = firewall.payloads(
        [
            {"source": "page", "data": {"text/html": "<script>x()</script>doc"}, "start": 3},
            {"source": "set_next_input", "text": "x = 1", "replace": False},
            {"source": "edit_magic", "filename": "/etc/passwd"},
            "not a payload",
        ]
    )
    assert payloads == [
        {"source": "page", "data": {"text/html": "doc"}, "start": 3},
        {"source": "set_next_input", "text": "x = 1", "replace": False},
    ]
    assert any("edit_magic" in r for r in removed) and any("<script>" in r for r in removed)


def test_inspect_and_user_expression_notes_go_into_text_plain(firewall: OutputFirewall) -> None:
    reply = firewall.inspect_reply(
        {"found": True, "data": {"text/plain": "doc", "text/html": "<img src=x onerror=y()>"}}
    )
    assert reply["found"] and "output firewall" in reply["data"]["text/plain"]
    assert firewall.inspect_reply(None)["found"] is False
    entry = firewall.user_expression({"application/javascript": "x()"})
    assert entry["status"] == "ok" and "output firewall" in entry["data"]["text/plain"]


def test_complete_reply_from_garbage_is_well_formed(firewall: OutputFirewall) -> None:
    reply = firewall.complete_reply({"matches": [1, "ok", None], "cursor_start": "x"}, 7)
    assert reply == {
        "status": "ok",
        "matches": ["ok"],
        "cursor_start": 7,
        "cursor_end": 7,
        "metadata": {},
    }


@pytest.mark.parametrize(
    "css",
    [
        "a{background:url(http://e/)}",
        "a{background:u\\72l(http://e/)}",
        "@import 'http://e/x.css';",
        "a{background-image:image-set('http://e/x.png' 1x)}",
        "a{position:fixed}",
        "a{behavior:url(x.htc)}",
        "a{background:ur/**/l(http://e/)}",
    ],
)
def test_css_that_loads_or_overlays_is_blocked(css: str) -> None:
    found: list[str] = []
    cleaned = clean_css(css, found)
    flat = cleaned.lower()
    assert not re.search(r"url\s*\(|@import|position\s*:\s*fixed|image-set\s*\(", flat)
    assert found or "ur l(" in cleaned  # a comment splits a name: no function at all


def test_css_escapes_cannot_close_the_style_element() -> None:
    cleaned = clean_html('<style>a{content:"\\3c/style\\3e<img src=x onerror=y()>"}</style>')
    assert "</style><img" not in cleaned.text
    assert_inert_bundle({"text/html": cleaned.text})


def test_style_elements_lose_loading_css_but_keep_the_rest() -> None:
    cleaned = clean_html("<style>.a{color:red;background:url(http://e/)}</style><p class=a>x</p>")
    assert ".a{color:red;background:sandbox-blocked(http://e/)}" in cleaned.text
    assert cleaned.removed == ["CSS url("]


def test_a_matplotlib_like_svg_stays_a_valid_image() -> None:
    svg = (
        '<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN"'
        ' "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">\n'
        '<svg xmlns:xlink="http://www.w3.org/1999/xlink" width="10pt" height="10pt"'
        ' viewBox="0 0 10 10" xmlns="http://www.w3.org/2000/svg" version="1.1">'
        "<metadata><rdf:RDF><cc:Work><dc:title>t</dc:title></cc:Work></rdf:RDF></metadata>"
        '<defs><path id="p" d="M 0 0 L 1 1"/></defs><use xlink:href="#p" x="1"/>'
        "<text>a\u00a0b</text></svg>"
    )
    cleaned = clean_svg(svg)
    assert cleaned.removed == []
    assert '<use href="#p" x="1"></use>' in cleaned.text
    assert "&#160;" in cleaned.text and "&nbsp;" not in cleaned.text
    assert "<metadata" not in cleaned.text


# -- an HTML output's CSS and ids stay in the output (DOM clobbering, page restyling) ----------


def _scope(cleaned: str) -> str:
    found = re.match(r'<div class="(sbx-[0-9a-f]{10})">', cleaned)
    assert found, cleaned
    return found[1]


def test_ids_are_prefixed_and_names_removed() -> None:
    """<a id=MathJax name=MathJax> would make window.MathJax an element (CVE-2024-43805)."""
    cleaned = clean_html('<a id="MathJax" name="MathJax" href="#MathJax">m</a><p id="jp-main">')
    assert 'id="MathJax"' not in cleaned.text and "name=" not in cleaned.text
    prefixed = re.findall(r'id="(sbx-[0-9a-f]{10})-(MathJax|jp-main)"', cleaned.text)
    assert len(prefixed) == 2 and prefixed[0][0] == prefixed[1][0]
    assert f'href="#{prefixed[0][0]}-MathJax"' in cleaned.text  # the fragment follows its id
    assert "name attribute" in cleaned.removed


def test_the_one_form_control_is_a_checkbox_and_its_label_follows_its_id() -> None:
    cleaned = clean_html(
        '<input type="password" name="p" value="x" autofocus form="f">'
        '<input id="fold" type="checkbox" checked><label for="fold">more</label>'
    )
    password, fold = re.findall(r"<input[^>]*>", cleaned.text)
    assert password == '<input type="checkbox">'
    prefix = re.search(r'id="(sbx-[0-9a-f]{10}-)fold"', fold)
    assert prefix is not None and 'checked=""' in fold
    assert f'<label for="{prefix[1]}fold">more</label>' in cleaned.text
    assert "<input> other than a checkbox (shown as one)" in cleaned.removed
    assert {"name attribute", "value attribute", "autofocus attribute", "form attribute"} <= set(
        cleaned.removed
    )
    assert clean_html('<input type="checkbox" id="a"><label for="a">x</label>').removed == []


@pytest.mark.parametrize(
    "css",
    [
        ".jp-Notebook { display: none !important }",
        "body::after { content: 'Session expired: re-enter your password' }",
        ":root { --jp-layout-color0: red }",
        "html, body { background: red }",
        "* { visibility: hidden }",
        "@media screen { .jp-Cell { display: none } }",
        "@supports (display: grid) { #main { display: none } }",
    ],
)
def test_an_outputs_css_reaches_only_the_output(css: str) -> None:
    cleaned = clean_html(f"<style>{css}</style><p>x</p>")
    scope = _scope(cleaned.text)
    sheet = re.search(r"<style>(.*)</style>", cleaned.text, re.DOTALL)
    assert sheet is not None
    rules = re.findall(r"([^{}]+)\{[^{}]*\}", re.sub(r"@(media|supports)[^{]*\{", "", sheet[1]))
    assert rules, sheet[1]
    for selectors in rules:
        for selector in selectors.split(","):
            assert selector.strip().startswith(f".{scope} "), (selector, sheet[1])
    assert cleaned.text.endswith("</div>")


def test_at_rules_that_reach_the_page_are_dropped() -> None:
    cleaned = clean_html(
        "<style>@keyframes jp-spin { from {} } @font-face { font-family: x } "
        "@page { margin: 0 } p { color: red }</style>"
    )
    assert "@keyframes" not in cleaned.text and "@font-face" not in cleaned.text
    assert "@page" not in cleaned.text and "color: red" in cleaned.text
    assert {"CSS @keyframes rule", "CSS @font-face rule", "CSS @page rule"} <= set(cleaned.removed)


def test_the_styler_shape_keeps_working() -> None:
    """pandas' Styler: #T_x_row0_col0 selectors over cells with those ids; the CSS names the
    renamed ids, inside the output's scope, and the sheet is laid out as pandas wrote it."""
    html = (
        '<style type="text/css">\n#T_ab12_row1_col0 {\n  background-color: yellow;\n}\n'
        "</style>\n"
        '<table id="T_ab12">\n<tr><td id="T_ab12_row1_col0" class="data row1 col0">3</td>'
        "</tr>\n</table>\n"
    )
    cleaned = clean_html(html)
    scope = _scope(cleaned.text)
    assert cleaned.removed == []
    assert f".{scope} #{scope}-T_ab12_row1_col0 {{\n  background-color: yellow;\n}}" in (
        cleaned.text
    )
    assert f'<td id="{scope}-T_ab12_row1_col0"' in cleaned.text


def test_inline_svg_references_follow_their_ids() -> None:
    cleaned = clean_html(
        '<svg><defs><clipPath id="c"><rect width="5" height="5"/></clipPath></defs>'
        '<g clip-path="url(#c)"><use href="#c"/></g></svg>'
    )
    scope = re.search(r'id="(sbx-[0-9a-f]{10})-c"', cleaned.text)
    assert scope is not None, cleaned.text
    assert f'clip-path="url(#{scope[1]}-c)"' in cleaned.text
    assert f'href="#{scope[1]}-c"' in cleaned.text


def test_a_css_escape_cannot_close_the_style_element_after_scoping() -> None:
    """tinycss2 writes a string's escapes out as characters: a `\\3c` is written back escaped."""
    for css in ('a{content:"\\3c/style\\3e<img src=x onerror=y()>"}', "a{content:'\\3c'}"):
        cleaned = clean_html(f"<style>{css}</style>")
        assert "<img" not in cleaned.text.replace("&lt;img", "")
        assert cleaned.text.count("</style>") == 1
        assert_inert_bundle({"text/html": cleaned.text})


def test_a_widget_view_passes_as_its_model_id_only(firewall: OutputFirewall) -> None:
    view = {"model_id": "a5ffd98e47c746f6", "version_major": 2, "version_minor": 0}
    shown = firewall.bundle(
        {"application/vnd.jupyter.widget-view+json": {**view, "_esm": "alert(1)"}}
    )
    assert shown.data == {"application/vnd.jupyter.widget-view+json": view}
    forged = firewall.bundle(
        {"application/vnd.jupyter.widget-view+json": {"model_id": "<img onerror=x()>"}}
    )
    assert forged.data == {} and forged.removed
