"""The small formats every view shares: text shown as typed in a Markdown element (`plain`),
the CLI's flag names said as the web form's fields, and numbers with their units (seconds in,
ms on screen; "n/a" for a figure the trace does not define)."""

from __future__ import annotations

import re

_MARKDOWN_SPECIAL = re.compile(r"([!-/:-@\[-`{-~])")


def plain(text: str) -> str:
    """`text` for a Markdown-rendering element, shown as typed: every ASCII punctuation mark
    backslash-escaped (CommonMark), so a file name such as `**x** [a](javascript:…)` is no
    bold, link, image, Streamlit directive (`:red[…]`, `:material/…:`) or formula (`$…$`);
    line breaks become spaces."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(text.splitlines()))


def fmt_num(value: float | None, fmt: str = "{:,.3g}") -> str:
    """A number in the terminal views (three significant figures unless told); "n/a" for None."""
    return "n/a" if value is None else fmt.format(value)


def fmt_value(value: float | None, spec: str = "{:,.2f}") -> str:
    """A figure for a metric tile; "n/a" when the trace does not define it."""
    return fmt_num(value, spec)


# The library's messages name the CLI's flags; the web views name their own fields instead.
WEB_WORDS = (
    ("--synthesize-arrivals RATE", "a rate in “Synthesize Poisson arrivals” (Start, Reading "
                                   "options)"),
    ("--synthesize-arrivals", "“Synthesize Poisson arrivals” (Start, Reading options)"),
    ("--arrival-rate RPS", "a rate in “Arrival rate for a trace without timestamps” "
                           "(Recommend, Search settings)"),
    ("pass --tokenizer DIR for exact counts", "the CLI's --tokenizer DIR counts them exactly"),
)


def web_words(text: str) -> str:
    """A library message with the CLI flags it names said as the web form's fields."""
    for flag, field in WEB_WORDS:
        text = text.replace(flag, field)
    return text


def fmt_ms(seconds: float | None, spec: str = "{:,.0f} ms") -> str:
    """Seconds shown as milliseconds."""
    return "n/a" if seconds is None else spec.format(seconds * 1e3)


def round_ms(value: float | None, digits: int = 1) -> float | None:
    """Seconds as milliseconds rounded for a table cell; None stays None."""
    return None if value is None else round(value * 1e3, digits)
