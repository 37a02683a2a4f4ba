"""The formatting every renderer shares: times from integer ns to ms or us, numbers, percentages, and text from
traces made safe for a terminal. Nothing here knows a document's layout."""

from __future__ import annotations

import math

from specprof.analyzer.errors import clean  # noqa: F401  (the one cleaner of text for a terminal: analyzer/errors.py)

# -- JSON numbers ------------------------------------------------------------------------------------------------


def ms(ns) -> float:
    """ns as ms (6 decimals: exact for integer ns); None counts 0."""
    return round(float(ns or 0) / 1e6, 6)


def ms_or_null(ns) -> float | None:
    """ns as ms (6 decimals), or None when unknown (None, NaN, infinite)."""
    return None if _bad(ns) else round(float(ns) / 1e6, 6)


def us_or_null(ns) -> float | None:
    """ns as us (3 decimals), or None when unknown."""
    return None if _bad(ns) else round(float(ns) / 1e3, 3)


def num(x, digits: int = 6) -> float | None:
    """A float rounded to `digits`, or None when unknown."""
    return None if _bad(x) else round(float(x), digits)


def _bad(x) -> bool:
    return x is None or (isinstance(x, float) and not math.isfinite(x))


def cut(text, width: int) -> str:
    """Text shortened to `width` characters (the last one an ellipsis); None is empty. (For documents that put
    text on screen as text, the HTML report's: no cleaning.)"""
    s = "" if text is None else str(text)
    return s if len(s) <= width else s[: width - 1] + "…"


# -- terminal text -----------------------------------------------------------------------------------------------


def table(headers: list[str], rows: list[list], align: str | None = None) -> str:
    """Columns padded to fit; `align` is one char per column, 'l' or 'r'."""
    cells = [[clean(h) for h in headers]] + [[clean(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    align = align or "l" + "r" * (len(headers) - 1)
    out = []
    for n, r in enumerate(cells):
        line = "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(r, widths, align))
        out.append(line.rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def bullets(lines) -> str:
    return "\n".join(f"- {clean(line)}" for line in lines)


def f_ms(ns, digits: int = 3) -> str:
    """ns as ms; None counts 0."""
    return f"{(ns or 0) / 1e6:,.{digits}f}"


def f_ms_or_dash(ns, digits: int = 3) -> str:
    """ns as ms, or "-" when unknown."""
    return "-" if ns is None else f"{ns / 1e6:,.{digits}f}"


def f_us(ns) -> str:
    return "-" if ns is None else f"{ns / 1e3:,.1f}"


def f_x(value, digits: int = 2) -> str:
    """A ratio: 1.23x."""
    return "-" if value is None else f"{value:.{digits}f}x"


def f_num(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def pct(fraction, digits: int = 1) -> str:
    """A share (a fraction, derived/views.py `share`) in %, or "-" when there is none."""
    return "-" if fraction is None else f"{100.0 * fraction:.{digits}f}%"
