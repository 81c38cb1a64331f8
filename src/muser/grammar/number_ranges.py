"""GBNF expressions for integers in a range, written canonically (no leading zeros, no "-0").

Used by the JSON-schema converter for `minimum`/`maximum` (and their exclusive
forms). An open side is capped at 16 digits, which is what a JSON number can
hold exactly in a double anyway.

The construction works digit by digit on equal-length decimal strings: for
`[x, y]` with the same number of digits, a shared leading part is a literal;
otherwise the first digit splits the range into "x's first digit, then at least
the rest of x", "digits strictly between, then anything", and "y's first digit,
then at most the rest of y".
"""

from __future__ import annotations

UNBOUNDED_DIGITS = 16
UNBOUNDED_MAGNITUDE = 10**UNBOUNDED_DIGITS - 1


def _digit_class(lo: int, hi: int) -> str:
    return f"[{lo}]" if lo == hi else f"[{lo}-{hi}]"


def _any_digits(count: int) -> str:
    if count == 0:
        return ""
    return "[0-9]" if count == 1 else f"[0-9]{{{count}}}"


def _same_length(x: str, y: str) -> str:
    """Decimal strings of len(x) digits between x and y (inclusive), x <= y."""
    n = len(x)
    if n == 0:
        return ""
    if x == y:
        return f'"{x}"'
    k = 0
    while x[k] == y[k]:
        k += 1
    prefix = f'"{x[:k]}" ' if k else ""
    x0, y0 = int(x[k]), int(y[k])
    rest = n - k - 1
    x_rest, y_rest = x[k + 1 :], y[k + 1 :]
    parts = []
    low_first = x0 if x_rest == "0" * rest else x0 + 1
    high_last = y0 if y_rest == "9" * rest else y0 - 1
    if low_first != x0:
        parts.append(_join(_digit_class(x0, x0), _same_length(x_rest, "9" * rest)))
    if low_first <= high_last:
        parts.append(_join(_digit_class(low_first, high_last), _any_digits(rest)))
    if high_last != y0:
        parts.append(_join(_digit_class(y0, y0), _same_length("0" * rest, y_rest)))
    body = parts[0] if len(parts) == 1 else "(" + " | ".join(parts) + ")"
    return prefix + body


def _join(a: str, b: str) -> str:
    return f"{a} {b}" if b else a


def nonnegative_range(lo: int, hi: int) -> str | None:
    """Canonical decimal integers in [lo, hi] (0 <= lo); None if the range is empty."""
    if lo > hi:
        return None
    parts = []
    full_run: list[int] = []  # digit counts whose whole band [10^(d-1), 10^d - 1] is inside

    def flush() -> None:
        if full_run:
            parts.append(_join("[1-9]", _digit_count(full_run[0] - 1, full_run[-1] - 1)))
            full_run.clear()

    for digits in range(len(str(lo)), len(str(hi)) + 1):
        smallest = 0 if digits == 1 else 10 ** (digits - 1)
        largest = 10**digits - 1
        a, b = max(lo, smallest), min(hi, largest)
        if a > b:
            continue
        if digits > 1 and a == smallest and b == largest:
            full_run.append(digits)
            continue
        flush()
        parts.append(_same_length(str(a), str(b)))
    flush()
    return parts[0] if len(parts) == 1 else "(" + " | ".join(parts) + ")"


def _digit_count(low: int, high: int) -> str:
    """[0-9] repeated between low and high times."""
    if high == 0:
        return ""
    if low == high:
        return _any_digits(low)
    return f"[0-9]{{{low},{high}}}"


def integer_range(lo: int | None, hi: int | None) -> str | None:
    """Canonical decimal integers in [lo, hi]; None means open (capped at 16 digits).

    Returns None when no integer fits.
    """
    lo_eff = -UNBOUNDED_MAGNITUDE if lo is None else lo
    hi_eff = UNBOUNDED_MAGNITUDE if hi is None else hi
    if lo_eff > hi_eff:
        return None
    parts = []
    if lo_eff < 0:
        magnitude_lo = 1 if hi_eff >= 0 else -hi_eff
        negative = nonnegative_range(magnitude_lo, -lo_eff)
        if negative is not None:
            parts.append(f'"-" {negative}')
    if hi_eff >= 0:
        positive = nonnegative_range(max(lo_eff, 0), hi_eff)
        if positive is not None:
            parts.append(positive)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else "(" + " | ".join(parts) + ")"
