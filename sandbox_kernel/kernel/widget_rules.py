"""The widget firewall's rules as data: which (model, view) pairs the page may be asked to
render, and what each field of a model becomes in the page (widgets.py applies them).

What a frontend writes as HTML, fetches or applies as CSS is decided by the VIEW, and the
view by the model's state (`_view_module`, `_view_name`). So a model passes only as its own
package defines it: PAIRS holds every (model module, model, view module, view) of
ipywidgets 8 (@jupyter-widgets/base 2, controls 2, output 1) and ipympl (jupyter-matplotlib),
as their Python classes declare them; None is a model with no view of its own.

The fields, read from the views (ipywidgets' packages/*/src, ipympl's src):

    markup      innerHTML: HTML's and HTMLMath's value; a description with
                description_allow_html (every DescriptionView, Checkbox's too)
    typeset     given to MathJax: every description, Label's value, HTMLMath's value
    css         style.setProperty: every public field of a style model and of LayoutModel,
                ipympl's _cursor, ColorsInput's colors
    url         an <img>/<video>/<audio> source: Image/Video/Audio's value when format is
                'url' (bytes), ipympl's _data_url
    classes     classList: _dom_classes, icon, icons, toolitems' images
    link ends   Link/DirectionalLink copy a field from one model to another in the page,
                past this firewall: an end may only name a field of none of the kinds above

Module versions are version specifiers (semver ranges: `2.0.0`, `^0.12`, `~1.5.0`,
`>=1 <3`); a manager that loads a module from a CDN builds its URL from them.

Must not import: anything Jupyter, wasmtime.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "CSS_MODELS",
    "IDENTITY_KEYS",
    "LINK_MODELS",
    "MARKUP_VALUE_MODELS",
    "MEDIA_MODELS",
    "MODULES",
    "PAIRS",
    "TYPESET_VALUE_MODELS",
    "VERSION_KEYS",
    "inert_class_list",
    "inert_css_value",
    "inert_data_url",
    "is_version_range",
    "sensitive_fields",
]

BASE, CONTROLS, OUTPUT, MPL = (
    "@jupyter-widgets/base",
    "@jupyter-widgets/controls",
    "@jupyter-widgets/output",
    "jupyter-matplotlib",
)
MODULES: Final = frozenset({BASE, CONTROLS, OUTPUT, MPL})
IDENTITY_KEYS: Final = ("_model_module", "_model_name", "_view_module", "_view_name")
VERSION_KEYS: Final = ("_model_module_version", "_view_module_version")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _controls(pairs: str) -> set[tuple[str, str, str | None, str | None]]:
    """'Model:View ...' of @jupyter-widgets/controls; a view of '-' is none."""
    found: set[tuple[str, str, str | None, str | None]] = set()
    for pair in pairs.split():
        model, view = pair.split(":")
        found.add(
            (CONTROLS, model, None, None) if view == "-" else (CONTROLS, model, CONTROLS, view)
        )
    return found


# (model module, model name, view module, view name), as ipywidgets 8.1 and ipympl 0.10
# declare them (`_model_*` and `_view_*` traits of every class).
PAIRS: Final = frozenset(
    {
        (BASE, "LayoutModel", BASE, "LayoutView"),
        (BASE, "StyleModel", BASE, "StyleView"),
        (BASE, "DOMWidgetModel", None, None),
        (BASE, "WidgetModel", None, None),
        (OUTPUT, "OutputModel", OUTPUT, "OutputView"),
        (MPL, "MPLCanvasModel", MPL, "MPLCanvasView"),
        (MPL, "ToolbarModel", MPL, "ToolbarView"),
        *{
            (CONTROLS, model, BASE, "StyleView")
            for model in _words(
                """ButtonStyleModel CheckboxStyleModel DescriptionStyleModel
                HTMLMathStyleModel HTMLStyleModel LabelStyleModel ProgressStyleModel
                SliderStyleModel StringStyleModel TextStyleModel ToggleButtonStyleModel
                ToggleButtonsStyleModel"""
            )
        },
        *_controls(
            """AccordionModel:AccordionView AudioModel:AudioView BoxModel:BoxView
            BoundedFloatTextModel:FloatTextView BoundedIntTextModel:IntTextView
            ButtonModel:ButtonView CheckboxModel:CheckboxView ColorPickerModel:ColorPickerView
            ColorsInputModel:ColorsInputView ComboboxModel:ComboboxView
            ControllerAxisModel:ControllerAxisView ControllerButtonModel:ControllerButtonView
            ControllerModel:ControllerView DatePickerModel:DatePickerView
            DatetimeModel:DatetimeView NaiveDatetimeModel:DatetimeView DropdownModel:DropdownView
            FileUploadModel:FileUploadView FloatLogSliderModel:FloatLogSliderView
            FloatProgressModel:ProgressView IntProgressModel:ProgressView
            FloatRangeSliderModel:FloatRangeSliderView FloatSliderModel:FloatSliderView
            FloatTextModel:FloatTextView FloatsInputModel:FloatsInputView GridBoxModel:GridBoxView
            HBoxModel:HBoxView VBoxModel:VBoxView HTMLMathModel:HTMLMathView HTMLModel:HTMLView
            ImageModel:ImageView IntRangeSliderModel:IntRangeSliderView
            IntSliderModel:IntSliderView IntTextModel:IntTextView IntsInputModel:IntsInputView
            NumbersInputBaseModel:TagsInputView LabelModel:LabelView PasswordModel:PasswordView
            PlayModel:PlayView RadioButtonsModel:RadioButtonsView SelectModel:SelectView
            SelectMultipleModel:SelectMultipleView
            SelectionRangeSliderModel:SelectionRangeSliderView
            SelectionSliderModel:SelectionSliderView StackModel:StackView TabModel:TabView
            TagsInputModel:TagsInputView TextModel:TextView TextareaModel:TextareaView
            TimeModel:TimeView ToggleButtonModel:ToggleButtonView
            ToggleButtonsModel:ToggleButtonsView ValidModel:ValidView VideoModel:VideoView
            BoolModel:- DOMWidgetModel:- DescriptionModel:- DirectionalLinkModel:- LinkModel:-
            StringModel:- TagsInputBaseModel:- WidgetModel:-"""
        ),
    }
)

# Models whose every public field is a CSS value (StyleView, LayoutView).
CSS_MODELS: Final = frozenset(
    {model for module, model, _, view in PAIRS if view in ("StyleView", "LayoutView")}
)
# The media models: (the source's MIME type family, for format 'url').
MEDIA_MODELS: Final = {"ImageModel": "image", "VideoModel": "video", "AudioModel": "audio"}
LINK_MODELS: Final = frozenset({"LinkModel", "DirectionalLinkModel"})
MARKUP_VALUE_MODELS: Final = frozenset({"HTMLModel", "HTMLMathModel"})
TYPESET_VALUE_MODELS: Final = frozenset({"HTMLMathModel", "LabelModel"})
# Fields of every model that the views above turn into markup, CSS, URLs or classes, or that
# decide which view renders the model (a link may copy into none of them).
_ALWAYS_SENSITIVE: Final = frozenset(
    {
        *IDENTITY_KEYS,
        *VERSION_KEYS,
        "_dom_classes",
        "description",
        "description_allow_html",
        "icon",
        "icons",
        "layout",
        "style",
        "children",
        "outputs",
        "toolitems",
        "_cursor",
        "_data_url",
        "source",
        "target",
    }
)


def sensitive_fields(model: str) -> frozenset[str] | None:
    """The fields of `model` that a link may not write; None: all of them (a style or layout
    model, whose every field is CSS)."""
    if model in CSS_MODELS:
        return None
    extra: set[str] = set()
    if model in MARKUP_VALUE_MODELS | TYPESET_VALUE_MODELS | frozenset(MEDIA_MODELS):
        extra.add("value")
    if model in MEDIA_MODELS:
        extra.add("format")
    if model == "ColorsInputModel":
        extra.add("value")
    return _ALWAYS_SENSITIVE | extra


# -- values ----------------------------------------------------------------------------------

# A semver range as npm reads it: comparator sets joined by `||`, each comparators or a
# hyphen range; versions may be partial or use x/* wildcards. Nothing else: no path, URL,
# query, fragment or package name.
_PART = r"(?:0|[1-9][0-9]{0,8}|[xX*])"
_IDS = r"[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*"  # a pre-release's or a build's identifiers
_VERSION = rf"v?{_PART}(?:\.{_PART}){{0,2}}(?:-{_IDS})?(?:\+{_IDS})?"
_COMPARATOR = rf"(?:\^|~|>=|<=|>|<|=)? *{_VERSION}"
_SET = rf"(?:{_VERSION} +- +{_VERSION}|{_COMPARATOR}(?: +{_COMPARATOR})*|\*|)"
_RANGE = re.compile(rf" *{_SET} *(?:\|\| *{_SET} *)*")
MAX_VERSION_CHARS: Final = 64


def is_version_range(value: object) -> bool:
    """Whether `value` is a module version specifier (a semver range) and nothing more."""
    return (
        isinstance(value, str)
        and len(value) <= MAX_VERSION_CHARS
        and _RANGE.fullmatch(value) is not None
    )


# CSS values a field may hold: words, numbers with units, colours, strings, and only the
# functions that compute a value (no url(), image-set(), image(), element(), attr(), ...).
_CSS_CHARS = re.compile(r"""[A-Za-z0-9 \t\n\r\f#%.,+\-_/*()'"!]*""")
_CSS_FUNCTION = re.compile(r"([A-Za-z_-][A-Za-z0-9_-]*)\s*\(")
CSS_FUNCTIONS: Final = _words(
    """rgb rgba hsl hsla hwb lab lch oklab oklch color color-mix calc min max clamp var
    repeat minmax fit-content linear-gradient radial-gradient conic-gradient
    repeating-linear-gradient repeating-radial-gradient repeating-conic-gradient span"""
)
MAX_CSS_CHARS: Final = 1_000


def inert_css_value(value: object) -> bool:
    """Whether a CSS-valued field's value can neither fetch, run nor reach past its property:
    None (the property removed), or text of words, numbers, colours, strings and the
    computing functions alone (no escapes, comments, `;`, `{`, `@`, `url(` or `image-set(`)."""
    if value is None:
        return True
    if not isinstance(value, str) or len(value) > MAX_CSS_CHARS:
        return False
    if _CSS_CHARS.fullmatch(value) is None or "/*" in value:
        return False
    return all(name.lower() in CSS_FUNCTIONS for name in _CSS_FUNCTION.findall(value))


_CLASS = re.compile(r"[A-Za-z0-9_ -]{0,200}")


def inert_class_list(value: object) -> bool:
    """A class name, or names split by spaces (an icon): letters, digits, '-' and '_'."""
    return isinstance(value, str) and _CLASS.fullmatch(value) is not None


_DATA_URL = {
    "image": re.compile(r"data:image/(png|jpeg|gif|webp|bmp|svg\+xml)[;,][A-Za-z0-9+/=;,%._-]*"),
    "video": re.compile(r"data:video/(mp4|webm|ogg)[;,][A-Za-z0-9+/=;,%._-]*"),
    "audio": re.compile(r"data:audio/(mpeg|mp3|wav|ogg|webm|aac|flac)[;,][A-Za-z0-9+/=;,%._-]*"),
}


def inert_data_url(value: object, family: str = "image") -> bool:
    """Whether a source is a data: URL of the family's media (nothing fetched)."""
    return isinstance(value, str) and _DATA_URL[family].fullmatch(value) is not None
