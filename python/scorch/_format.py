"""Storage formats: one level per dimension, each dense / compressed / singleton.

A Format is concrete: it has as many levels as the tensor has dimensions.  Named shorthands
("csr", "csf", ...) are resolved for a given number of dimensions by ``Format.parse``; the
parsing itself happens in the C core (csrc/format), so C and Python agree on every spelling.
"""
from __future__ import annotations

import operator

from . import _C

LEVEL_KINDS = tuple(_C.LEVEL_KINDS)  # ("dense", "compressed", "singleton")
_TWO_D = ("csr", "csc", "dcsr", "dcsc")
_ANY_D = ("dense", "coo", "csf")
NAMED = _ANY_D[:1] + _TWO_D[:2] + _ANY_D[1:2] + _TWO_D[2:] + _ANY_D[2:]


class Format:
    """A per-level storage format and its dimension order.

    ``Format("dc")`` is CSR; ``Format("dc", order=(1, 0))`` is CSC (level k stores
    dimension ``order[k]``); ``Format("c(nonunique)s")`` is COO.  Named formats are
    resolved against a number of dimensions with ``Format.parse("csf", ndim=3)``.
    """

    __slots__ = ("kinds", "unique", "order", "_tuple", "_info")

    def __init__(self, levels: str, order=None, ndim=None):
        if levels in _ANY_D:
            if ndim is None:
                raise ValueError(f"format {levels!r} needs ndim= (it exists for any order)")
        else:
            n = 2 if levels in _TWO_D else _count_levels(levels)
            if ndim is not None and ndim != n:
                raise ValueError(f"format {levels!r} has {n} levels, not ndim={ndim}")
            ndim = n
        kinds, unique, l2d = _C.parse_format(levels, ndim)
        if order is not None:
            try:   # (ints only: int() took 1.5 as 1, and the string "10" as (1, 0))
                if isinstance(order, (str, bytes)):
                    raise TypeError
                order = tuple(operator.index(d) for d in order)
            except TypeError:
                raise TypeError(f"format order must be a sequence of ints, got "
                                f"{order!r}") from None
            if sorted(order) != list(range(ndim)):
                raise ValueError(
                    f"format order {order} is not a permutation of 0..{ndim - 1}")
            l2d = order
        self._set(kinds, unique, l2d)

    @classmethod
    def parse(cls, spec, ndim: int) -> "Format":
        """The Format that ``spec`` (a name, a level string or a Format) means for an
        ``ndim``-dimensional tensor."""
        if isinstance(spec, Format):
            if spec.ndim != ndim:
                raise ValueError(
                    f"format {spec} has {spec.ndim} levels but the tensor has {ndim} dimensions")
            return spec
        if not isinstance(spec, str):
            raise TypeError(f"format must be a str or scorch.Format, not {type(spec).__name__}")
        if ndim < 1:
            raise ValueError("scorch tensors have at least one dimension (got a 0-D tensor)")
        if ndim > _C.MAX_ORDER:
            raise ValueError(f"scorch supports at most {_C.MAX_ORDER} dimensions, got {ndim}")
        f = cls.__new__(cls)
        f._set(*_C.parse_format(spec, ndim))
        return f

    def _set(self, kinds, unique, l2d):
        self.kinds = tuple(kinds)
        self.unique = tuple(bool(u) for u in unique)
        self.order = tuple(l2d)
        self._tuple = (self.kinds, self.unique, self.order)   # one object: compared and
        self._info = _C.format_info(self._tuple)              # hashed on every call

    def as_tuple(self):
        return self._tuple

    @property
    def ndim(self) -> int:
        return len(self.kinds)

    @property
    def levels(self) -> tuple:
        """Level kind names, outermost first."""
        return tuple(LEVEL_KINDS[k] for k in self.kinds)

    @property
    def text(self) -> str:
        """The level string, e.g. ``"dc"`` or ``"c(nonunique)s(nonunique)"``."""
        return self._info[0]

    @property
    def name(self):
        """The named format this is (``"csr"``, ...), or None."""
        return self._info[1]

    @property
    def has_dense_level(self) -> bool:
        return 0 in self.kinds

    def __eq__(self, other):
        return self is other or (isinstance(other, Format) and self._tuple == other._tuple)

    def __hash__(self):
        return hash(self._tuple)

    def __str__(self):
        if self.name:
            return self.name
        ident = self.order == tuple(range(self.ndim))
        return self.text if ident else f"{self.text} order={self.order}"

    def __repr__(self):
        if self.name:
            return f"Format({self.name!r})"
        ident = self.order == tuple(range(self.ndim))
        return f"Format({self.text!r})" if ident else f"Format({self.text!r}, order={self.order})"

    def __reduce__(self):
        return (_format_from_tuple, self.as_tuple())


def _format_from_tuple(kinds, unique, order):
    f = Format.__new__(Format)
    f._set(kinds, unique, order)
    return f


def _count_levels(levels: str) -> int:
    """Number of levels in an explicit level string ("dc", "d, compressed", ...)."""
    if not isinstance(levels, str):
        raise TypeError(f"levels must be a str, not {type(levels).__name__}")
    n, i = 0, 0
    while i < len(levels):
        ch = levels[i]
        if ch == "(":
            j = levels.find(")", i)
            i = len(levels) if j < 0 else j + 1
            continue
        if ch.isalpha():
            j = i
            while j < len(levels) and levels[j].isalpha():
                j += 1
            word = levels[i:j]
            if word not in LEVEL_KINDS and set(word) - set("dcs") and (len(word) > 8 or any(
                    k.startswith(word[:2]) for k in LEVEL_KINDS)):
                raise ValueError(  # (counted letter by letter it gave "order 15", and
                    # "compr, dense" "2 levels, 6 dimensions"; another short word gets
                    # the parser's column of the bad letter)
                    f"invalid format {levels!r}: unknown level {word!r} at column {i} "
                    f"(expected a name: {', '.join(NAMED)}; or levels "
                    f"{'/'.join(LEVEL_KINDS)} or d/c/s, e.g. \"dc\" or \"dense, compressed\")")
            n += 1 if word in LEVEL_KINDS else len(word)
            i = j
            continue
        i += 1
    if n == 0:
        raise ValueError(f"invalid format {levels!r}: no levels")
    return n
