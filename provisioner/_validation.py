"""Declarative parameter constraints, checked where parameters enter the library.

In the style of scikit-learn's `_param_validation` (much smaller): a function or class
states, per parameter, the list of what it accepts; `validate_params` raises one
`ProvisionerError` naming the first parameter that matches none of them, with what it
accepts. Errors name the Python parameter (`params` on the error); the CLI maps those
names to its flags when it prints them.

    >>> validate_params({"rps": 0}, {"rps": [Interval(Real, 0, None, closed="neither")]})
    Traceback (most recent call last):
    ...
    provisioner.errors.ProvisionerError: rps must be a finite number > 0 (got 0)
"""

from __future__ import annotations

import math
from numbers import Integral, Real

from .errors import ProvisionerError

__all__ = ["Interval", "Options", "validate_params", "Integral", "Real"]

# $/h per node or machine, in a cloud inventory or a sweep's price list: past a million an
# hour no node is rented (and the rental program's solver takes prices from ~1e20 for
# infinite, so --goal cost would rent everything). Here, not in `cloud`, because both
# `cloud` and `sweep` read it.
PRICE_USD_PER_H_RANGE = (0.0, 1e6)


class Interval:
    """Numbers of `type_` (Real or Integral, never bool) between `left` and `right`
    (None: unbounded); `closed` is "left", "right", "both" or "neither"."""

    def __init__(self, type_, left, right, *, closed: str = "both"):
        self.type, self.left, self.right, self.closed = type_, left, right, closed

    def is_satisfied_by(self, value) -> bool:
        if isinstance(value, bool) or not isinstance(value, self.type):
            return False
        if self.type is not Integral:   # a number used as a float: finite, and within a float's range
            try:
                if not math.isfinite(value):
                    return False
            except OverflowError:   # an int too large for a float
                return False
        if self.left is not None:
            if value < self.left or (value == self.left and self.closed not in ("left", "both")):
                return False
        if self.right is not None:
            if value > self.right or (value == self.right and self.closed not in ("right", "both")):
                return False
        return True

    def __str__(self) -> str:
        kind = "an integer" if self.type is Integral else "a finite number"
        lo_in, hi_in = self.closed in ("left", "both"), self.closed in ("right", "both")
        lo, hi = (f"{b}" if isinstance(b, int) or b is None else f"{b:g}"   # 10000000, not 1e+07
                  for b in (self.left, self.right))
        if self.right is None:
            return f"{kind} {'>=' if lo_in else '>'} {lo}" if self.left is not None else kind
        if self.left is None:
            return f"{kind} {'<=' if hi_in else '<'} {hi}"
        return f"{kind} in {'[' if lo_in else '('}{lo}, {hi}{']' if hi_in else ')'}"


class Options:
    """One of a fixed set of values."""

    def __init__(self, values):
        self.values = tuple(values)

    def is_satisfied_by(self, value) -> bool:
        return isinstance(value, str) and value in self.values

    def __str__(self) -> str:
        return "one of " + ", ".join(map(str, self.values))


def _satisfied(constraint, value) -> bool:
    if constraint is None:
        return value is None
    if isinstance(constraint, type):
        return isinstance(value, constraint)
    return constraint.is_satisfied_by(value)


def _describe(constraint) -> str:
    if constraint is None:
        return "None"
    if isinstance(constraint, type):
        return {bool: "True or False", str: "a string"}.get(constraint, f"a {constraint.__name__}")
    return str(constraint)


def validate_params(params: dict, constraints: dict) -> None:
    """Raise `ProvisionerError` for the first parameter of `params` that satisfies none
    of its constraints (a list of `Interval`, `Options`, a type, or None for None)."""
    for name, allowed in constraints.items():
        value = params[name]
        if any(_satisfied(c, value) for c in allowed):
            continue
        accepted = " or ".join(_describe(c) for c in allowed if c is not None)
        raise ProvisionerError(f"{name} must be {accepted} (got {shown(value)})", params=(name,))


def toml_float(value) -> float | None:
    """A finite float of a TOML number, or None (a boolean, a string, inf, nan, or an integer
    past a float's range: TOML integers are unbounded).

    >>> toml_float(2), toml_float(10 ** 400), toml_float(True), toml_float(float("inf"))
    (2.0, None, None, None)
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number + 0.0 if math.isfinite(number) else None   # + 0.0: a file's -0 is 0, never shown as "-0 ms"


def shown(value, digits: int = 20) -> str:
    """`repr(value)`, but an integer longer than `digits` digits as its size, so that an
    error quoting it stays one short line.

    >>> shown(10 ** 400), shown(12), shown("x")
    ('a 401-digit integer', '12', "'x'")
    """
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** digits:
        return f"a {len(str(abs(value))) if abs(value) < 10 ** 4000 else 'more than 4000'}-digit integer"
    return repr(value)
