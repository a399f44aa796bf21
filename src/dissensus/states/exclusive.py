"""Deciding, conservatively, that two routing conditions can never hold together (``docs/states.md``).

The router rejects two rules of equal priority with different actions and no
superiority between them unless their conditions are *provably exclusive*; anything this
module cannot prove exclusive is treated as possibly applying together (an error at
load time, never a silent pick at routing time).

The proof rules, over the parsed condition trees of :mod:`dissensus.states.conditions`:

* ``A or B`` is exclusive with ``C`` when both ``A`` and ``B`` are;
* ``A and B`` is exclusive with ``C and D`` when some conjunct of one side is exclusive
  with some conjunct of the other;
* two atoms are exclusive when they compare the same name with literals in a way no
  value satisfies (``x == "a"`` vs ``x == "b"``; ``x in [..]`` vs ``x == c`` outside it;
  ``x == c`` vs ``x != c`` or ``x not in [.., c, ..]``; disjoint ranges such as
  ``agreement < 0.5`` vs ``agreement >= 0.5``; an equality outside a range), using the
  same comparison semantics as evaluation (values of different kinds never compare as
  ordered). Equality is Python's, so ``x == true`` also holds for the number 1 (and
  ``x == false`` for 0), which does order: ``meta.x == true`` and ``meta.x > 0.5`` both
  hold when ``meta.x`` is 1, and are not exclusive;
* ``not X`` is exclusive with ``X``; ``false`` with anything.

Soundness (exclusive => never both true) is a property test; completeness is not
claimed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from dissensus.states.conditions import (
    And,
    Cmp,
    Condition,
    Const,
    ListLit,
    Lit,
    Node,
    Not,
    Or,
    Var,
    comparable,
    compare,
)

__all__ = ["exclusive"]


def _literal_set(c: Cmp) -> tuple[Var, str, tuple[object, ...]] | None:
    """``(var, kind, constants)`` for an atom comparing a name with literals."""
    if not isinstance(c.left, Var):
        return None
    if c.op in ("in", "not in") and isinstance(c.right, ListLit):
        return c.left, c.op, c.right.values
    if isinstance(c.right, Lit) and c.op not in ("in", "not in"):
        return c.left, c.op, (c.right.value,)
    return None


def _equals(value: object) -> tuple[object, ...]:
    """The values a case may hold that ``== value``, up to how they order: a boolean
    literal is also equal to the number 0 or 1 (``1 == true``), which orders as a number
    where the boolean never orders."""
    return (value, int(value)) if isinstance(value, bool) else (value,)


def _satisfies(op: str, value: object, bound: object) -> bool:
    """Whether some case value equal to ``value`` satisfies ``x <op> bound``."""
    return any(compare(op, v, bound) for v in _equals(value))


def _bounds_disjoint(a: tuple[str, object], b: tuple[str, object]) -> bool:
    if not comparable(a[1], b[1]):
        return False
    lower = [(c, op == ">") for op, c in (a, b) if op in (">", ">=")]
    upper = [(c, op == "<") for op, c in (a, b) if op in ("<", "<=")]
    if len(lower) != 1 or len(upper) != 1:
        return False
    (lo, lo_strict), (hi, hi_strict) = lower[0], upper[0]
    if compare(">", lo, hi):
        return True
    return bool(lo == hi and (lo_strict or hi_strict))


def _atoms_exclusive(a: Cmp, b: Cmp) -> bool:
    sa, sb = _literal_set(a), _literal_set(b)
    if sa is None or sb is None or sa[0] != sb[0]:
        return False
    (_, op1, vals1), (_, op2, vals2) = sa, sb
    pos1, pos2 = op1 in ("==", "in"), op2 in ("==", "in")
    neg1, neg2 = op1 in ("!=", "not in"), op2 in ("!=", "not in")
    if pos1 and pos2:
        return not any(x == y for x in vals1 for y in vals2)
    if pos1 and neg2:
        return all(any(x == y for y in vals2) for x in vals1)
    if neg1 and pos2:
        return all(any(x == y for y in vals1) for x in vals2)
    if pos1 and not neg2:
        return not any(_satisfies(op2, x, vals2[0]) for x in vals1)
    if pos2 and not neg1:
        return not any(_satisfies(op1, x, vals1[0]) for x in vals2)
    if not (neg1 or neg2):
        return _bounds_disjoint((op1, vals1[0]), (op2, vals2[0]))
    return False


def _same(a: object, b: object) -> bool:
    """Whether two conditions (or their parts) are the same condition: structural
    equality, but a boolean literal is never the same as a number (``true == 1`` in
    Python, yet ``x < true`` never holds where ``x < 1`` may)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if dataclasses.is_dataclass(a) and not isinstance(a, type) and type(a) is type(b):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _pair_exclusive(a: Node, b: Node) -> bool:
    if isinstance(a, Const) and not a.value:
        return True
    if isinstance(b, Const) and not b.value:
        return True
    if isinstance(a, Not) and _same(a.item, b):
        return True
    if isinstance(b, Not) and _same(b.item, a):
        return True
    if isinstance(a, Cmp) and isinstance(b, Cmp):
        return _atoms_exclusive(a, b)
    return False


def _conjuncts(node: Node) -> Sequence[Node]:
    if isinstance(node, And):
        return [c for item in node.items for c in _conjuncts(item)]
    return [node]


def _nodes_exclusive(a: Node, b: Node) -> bool:
    if isinstance(a, Or):
        return all(_nodes_exclusive(x, b) for x in a.items)
    if isinstance(b, Or):
        return all(_nodes_exclusive(a, y) for y in b.items)
    ca, cb = _conjuncts(a), _conjuncts(b)
    if len(ca) > 1 or len(cb) > 1:
        return any(_nodes_exclusive(x, y) for x in ca for y in cb)
    return _pair_exclusive(a, b)


def exclusive(a: Condition, b: Condition) -> bool:
    """True only when ``a`` and ``b`` provably never hold for the same case."""
    return _nodes_exclusive(a.tree, b.tree)
