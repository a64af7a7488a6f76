"""The dashboard's colours, chosen once: reference lines, one colour per state, and a trial palette whose colours
are told apart from each other and from every reference line, measured as a person sees them (CIE76 colour
difference in CIELAB), so that no trial wears the KL threshold's red or a near-twin of another trial's colour."""

from __future__ import annotations

from functools import cache

from plotly.colors import qualitative

THRESHOLD_COLOR = "#d62728"  # the KL guard's threshold and a suggested kl_target
FIT_COLOR = "#9467bd"  # a fitted curve
FRONT_COLOR = "#111111"  # the Pareto front
REFERENCE_COLORS = (THRESHOLD_COLOR, FIT_COLOR, FRONT_COLOR)
# One colour per state, on every page (points, timelines, tables).
STATE_COLORS = {"COMPLETE": "#2ca02c", "PRUNED": "#ff7f0e", "FAIL": "#d62728", "RUNNING": "#1f77b4",
                "WAITING": "#7f7f7f"}
OTHER_STATE_COLOR = "#7f7f7f"

MIN_TRIAL_DISTANCE = 12.0
"""CIE76 ΔE between any two trial colours: about five just-noticeable differences, apart at a glance."""
MIN_REFERENCE_DISTANCE = 25.0
"""ΔE between a trial colour and a reference line's: never mistaken for it."""
MIN_CHROMA = 30.0
"""C*ab of a trial colour: greys read as faded or disabled, not as a trial."""
CANDIDATES = (qualitative.Plotly + qualitative.D3 + qualitative.Dark2 + qualitative.Set1 + qualitative.Bold
              + qualitative.Vivid + qualitative.Prism + qualitative.Safe)


def _channel(value: int) -> float:
    """sRGB gamma expanded: c/12.92 below 0.04045, ((c + 0.055) / 1.055)^2.4 above (IEC 61966-2-1)."""
    c = value / 255.0
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def _hex_rgb(color: str) -> tuple[int, int, int]:
    text = color.strip()
    if text.startswith("rgb"):
        parts = text[text.index("(") + 1 : text.index(")")].split(",")
        red, green, blue = (int(float(part)) for part in parts[:3])
        return red, green, blue
    text = text.lstrip("#")
    return int(text[0:2], 16), int(text[2:4], 16), int(text[4:6], 16)


def lab(color: str) -> tuple[float, float, float]:
    """CIELAB (D65) of an sRGB colour: linear RGB -> XYZ (the sRGB matrix) -> L* = 116 f(Y/Yn) - 16,
    a* = 500 (f(X/Xn) - f(Y/Yn)), b* = 200 (f(Y/Yn) - f(Z/Zn)), f(t) = t^(1/3) above (6/29)^3, else
    t / (3 (6/29)^2) + 4/29."""
    r, g, b = (_channel(v) for v in _hex_rgb(color))
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def distance(first: str, second: str) -> float:
    """CIE76 ΔE = the Euclidean distance between two colours in CIELAB."""
    return sum((a - b) ** 2 for a, b in zip(lab(first), lab(second), strict=True)) ** 0.5


def chroma(color: str) -> float:
    _, a, b = lab(color)
    return (a * a + b * b) ** 0.5


@cache
def trial_palette() -> tuple[str, ...]:
    """The candidates in order, each kept when saturated enough and far enough from every reference line and from
    every colour kept before it."""
    kept: list[str] = []
    for color in CANDIDATES:
        if chroma(color) < MIN_CHROMA:
            continue
        if any(distance(color, ref) < MIN_REFERENCE_DISTANCE for ref in REFERENCE_COLORS):
            continue
        if all(distance(color, other) >= MIN_TRIAL_DISTANCE for other in kept):
            kept.append(color)
    return tuple(kept)


def trial_color(number: int) -> str:
    """A fixed colour per trial number, so a trial looks the same on every chart."""
    palette = trial_palette()
    return palette[number % len(palette)]
