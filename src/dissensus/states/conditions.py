"""A small, safe condition language for routing rules (``docs/states.md``).

Domain rules route on case metadata and on the reading, e.g.
``meta.category == "legal"`` or ``meta.risk == "high" and state == "DA"``. Conditions are
parsed with :mod:`ast` and only a whitelist of node types is accepted; nothing is ever
evaluated as Python. The grammar:

* names: ``state`` ("CA"/"DA"/"CD"/"DD"), ``agreement``, ``reasoning_similarity``
  (alias ``mean_similarity``), ``min_similarity``, ``decision``, ``tie`` (the list of
  tied labels, empty when none), ``abstentions``, ``agents`` (panel size),
  ``value_profiles`` (agents that state a value profile; ``null`` when the caller does
  not give it), and ``meta.<key>`` / ``meta.<key>.<sub>`` / ``meta["any key"]`` for case metadata;
* literals: strings, numbers, ``true``/``false``/``null`` (or ``True``/``False``/``None``),
  and lists ``[...]`` of literals;
* ``==  !=  <  <=  >  >=  in  not in`` (chains like ``0.5 <= agreement < 0.8`` too),
  ``and``, ``or``, ``not`` and parentheses; a bare name tests truthiness.

Choices this module makes:

* A missing metadata key reads as ``null``: ``meta.risk == "high"`` is false for a case
  without ``risk``, ``meta.risk != "high"`` is true.
* Ordering comparisons between values of different kinds (a number and a string, or
  ``null``) are false, never an error, so a rule cannot crash routing.
* ``x in y`` is false when ``y`` is not a list, string or mapping, and when ``y`` is a
  mapping and ``x`` a list or a mapping (no key is one): a case's metadata is the
  caller's data, and ``tie in meta.m`` or ``meta.a in meta.m`` over a ``meta.m`` object
  is a test that fails, never a ``TypeError`` out of routing.
* ``decision``, ``state`` and ``tie`` hold labels, which are text (a panel's decision
  ``1`` is read as ``"1"``): comparing one with a number or a boolean for equality or
  membership (``decision == 1``, ``decision in [1, 2]``, ``1 in tie``) could never hold,
  so it is refused when a rules or policy file is loaded, naming the field and the
  string to write instead. A rules document journalled with a run is read back without
  this check (``labels=False``): a run started before it keeps its meaning (the test
  never holds) and can be resumed to its end.
* Whether two conditions can hold together is decided in
  :mod:`dissensus.states.exclusive`.
* Nesting is capped at 100 levels (``_MAX_DEPTH``), counted over the parsed
  expression: each ``not``, sign, ``and``/``or``, comparison, list and ``meta`` key is
  a level. A longer chain (``not not ... true``, ``- - ... 1``) is refused like too
  many nested parentheses, with one error naming the field, never a ``RecursionError``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dissensus.errors import ConfigError
from dissensus.types import normalise_label

__all__ = ["NAMES", "Condition", "Node", "comparable", "compare", "parse_condition"]

NAMES = frozenset(
    {
        "state",
        "agreement",
        "reasoning_similarity",
        "mean_similarity",
        "min_similarity",
        "decision",
        "tie",
        "abstentions",
        "agents",
        "value_profiles",
    }
)
"""Names a condition may use besides ``meta``."""

_LITERAL_NAMES: dict[str, object] = {"true": True, "false": False, "null": None, "none": None}
_MAX_LENGTH = 4000
_MAX_DEPTH = 100

Env = Mapping[str, Any]
Eval = Callable[[Env], Any]


# --- structure (for the exclusivity analysis) -------------------------------------------


@dataclass(frozen=True)
class Lit:
    value: object


@dataclass(frozen=True)
class Var:
    path: tuple[str, ...]


@dataclass(frozen=True)
class ListLit:
    values: tuple[object, ...]


@dataclass(frozen=True)
class Cmp:
    op: str
    left: Lit | Var | ListLit
    right: Lit | Var | ListLit


@dataclass(frozen=True)
class Truth:
    var: Var


@dataclass(frozen=True)
class Not:
    item: Node


@dataclass(frozen=True)
class And:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Const:
    value: bool


Node = Cmp | Truth | Not | And | Or | Const
Term = Lit | Var | ListLit


# --- parsing ---------------------------------------------------------------------------

_CMP_OPS: dict[type[ast.cmpop], str] = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.In: "in",
    ast.NotIn: "not in",
}
_FLIP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _depth(tree: ast.AST) -> int:
    """How deeply ``tree`` nests (iteratively, so a deep tree cannot exhaust the stack)."""
    deepest = 0
    stack: list[tuple[ast.AST, int]] = [(tree, 1)]
    while stack:
        n, level = stack.pop()
        deepest = max(deepest, level)
        if level > _MAX_DEPTH:
            break
        stack.extend((child, level + 1) for child in ast.iter_child_nodes(n))
    return deepest


_LABEL_NAMES = frozenset({("decision",), ("state",), ("tie",)})
"""Names whose values are labels (text) or lists of labels: a number or a boolean never
equals one."""


def _literal(value: object) -> str:
    """A literal as a condition writes it (``true``, ``1.5``)."""
    return ("true" if value else "false") if isinstance(value, bool) else repr(value)


class _Parser:
    def __init__(self, text: str, where: str, file: str | None, labels: bool = True) -> None:
        self.text = text
        self.where = where
        self.file = file
        self.labels = labels

    def fail(self, message: str) -> ConfigError:
        return ConfigError(
            f"{message} in condition {self.text!r}", file=self.file, field=self.where
        )

    def parse(self) -> Node:
        if len(self.text) > _MAX_LENGTH:
            raise self.fail(f"condition longer than {_MAX_LENGTH} characters")
        try:
            tree = ast.parse(self.text.strip(), mode="eval")
        except SyntaxError as exc:
            raise self.fail(f"syntax error ({exc.msg})") from None
        except (RecursionError, MemoryError):
            raise self.fail(f"nested more than {_MAX_DEPTH} levels deep") from None
        if _depth(tree.body) > _MAX_DEPTH:
            raise self.fail(f"nested more than {_MAX_DEPTH} levels deep")
        return self.node(tree.body)

    def node(self, n: ast.expr) -> Node:
        if isinstance(n, ast.BoolOp):
            items = tuple(self.node(v) for v in n.values)
            return And(items) if isinstance(n.op, ast.And) else Or(items)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            return Not(self.node(n.operand))
        if isinstance(n, ast.Compare):
            return self.compare(n)
        term = self.term(n)
        if isinstance(term, Var):
            return Truth(term)
        if isinstance(term, Lit) and isinstance(term.value, bool):
            return Const(term.value)
        raise self.fail("a condition must be a comparison, a name, or true/false")

    def compare(self, n: ast.Compare) -> Node:
        terms = [self.term(n.left), *(self.term(c) for c in n.comparators)]
        atoms: list[Node] = []
        for i, op_node in enumerate(n.ops):
            op = _CMP_OPS.get(type(op_node))
            if op is None:
                raise self.fail(f"operator {type(op_node).__name__} is not allowed")
            left, right = terms[i], terms[i + 1]
            if isinstance(left, ListLit) and op not in ("==", "!="):
                raise self.fail("a list may only appear on the right of 'in' / 'not in'")
            if (
                op in ("in", "not in")
                and isinstance(right, Lit)
                and not isinstance(right.value, str)
            ):
                raise self.fail(f"'{op}' needs a list, a string or a name on its right")
            if op in _FLIP and isinstance(left, Lit) and isinstance(right, Var):
                left, right, op = right, left, _FLIP[op]
            if self.labels:
                self.check_label(left, op, right)
            atoms.append(Cmp(op, left, right))
        return atoms[0] if len(atoms) == 1 else And(tuple(atoms))

    def check_label(self, left: Term, op: str, right: Term) -> None:
        """Refuse a number or boolean compared with a label (``decision == 1``, ``1 in
        tie``): labels are text (a decision ``1`` is read as ``"1"``), so the test could
        never hold, and the rule would never fire, with nothing said."""
        values: tuple[object, ...]
        if isinstance(left, Var) and left.path in _LABEL_NAMES and op in ("==", "!="):
            values = (right.value,) if isinstance(right, Lit) else ()
        elif isinstance(left, Var) and left.path in _LABEL_NAMES and op in ("in", "not in"):
            values = right.values if isinstance(right, ListLit) else ()
        elif isinstance(right, Var) and right.path == ("tie",) and op in ("in", "not in"):
            values = (left.value,) if isinstance(left, Lit) else ()
        else:
            return
        for value in values:
            if isinstance(value, int | float):  # bool too
                name = (left if isinstance(left, Var) else right).path[0]  # type: ignore[union-attr]
                label = normalise_label(value)
                raise self.fail(
                    f'{name!r} holds labels, which are text: write "{label}", not '
                    f"{_literal(value)} (a decision {_literal(value)} is read as "
                    f'"{label}"), or the test never holds'
                )

    def term(self, n: ast.expr) -> Term:
        if isinstance(n, ast.Constant):
            if n.value is None or isinstance(n.value, str | int | float | bool):
                return Lit(n.value)
            raise self.fail(f"literal {n.value!r} is not allowed")
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub | ast.UAdd):
            inner = self.term(n.operand)
            if (
                isinstance(inner, Lit)
                and isinstance(inner.value, int | float)
                and not isinstance(inner.value, bool)
            ):
                return Lit(-inner.value if isinstance(n.op, ast.USub) else inner.value)
            raise self.fail("a sign may only precede a number")
        if isinstance(n, ast.List | ast.Tuple):
            values: list[object] = []
            for elt in n.elts:
                item = self.term(elt)
                if not isinstance(item, Lit):
                    raise self.fail("a list may hold literals only")
                values.append(item.value)
            return ListLit(tuple(values))
        if isinstance(n, ast.Name):
            if n.id.lower() in _LITERAL_NAMES and n.id not in NAMES:
                return Lit(_LITERAL_NAMES[n.id.lower()])
            if n.id in NAMES:
                return Var((n.id,))
            if n.id == "meta":
                raise self.fail("'meta' needs a key (meta.<key>)")
            raise self.fail(
                f"unknown name {n.id!r} (known: meta.<key>, {', '.join(sorted(NAMES))})"
            )
        if isinstance(n, ast.Attribute | ast.Subscript):
            return Var(self.meta_path(n))
        raise self.fail(f"{type(n).__name__} is not allowed")

    def meta_path(self, n: ast.expr) -> tuple[str, ...]:
        keys: list[str] = []
        while isinstance(n, ast.Attribute | ast.Subscript):
            if isinstance(n, ast.Attribute):
                keys.append(n.attr)
            else:
                key = n.slice
                if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                    raise self.fail("meta[...] needs a string key")
                keys.append(key.value)
            n = n.value
        if not (isinstance(n, ast.Name) and n.id == "meta"):
            raise self.fail("only meta.<key> may have attributes or subscripts")
        return ("meta", *reversed(keys))


# --- evaluation ------------------------------------------------------------------------


def _lookup(path: tuple[str, ...]) -> Eval:
    if len(path) == 1:
        name = path[0]
        return lambda env: env.get(name)
    if len(path) == 2:
        top, key = path

        def one_level(env: Env) -> Any:
            value = env.get(top)
            if type(value) is dict:  # the usual case, without the slower ABC check
                return value.get(key)
            return value.get(key) if isinstance(value, Mapping) else None

        return one_level

    def walk(env: Env) -> Any:
        value: Any = env.get(path[0])
        for key in path[1:]:
            if not isinstance(value, Mapping):
                return None
            value = value.get(key)
        return value

    return walk


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def comparable(a: object, b: object) -> bool:
    """Whether ``a`` and ``b`` may be ordered: two numbers, or two strings."""
    return (_number(a) and _number(b)) or (isinstance(a, str) and isinstance(b, str))


def _contains(container: object, item: object) -> bool | None:
    """``item in container``, or ``None`` when ``container`` cannot contain anything."""
    if isinstance(container, str):
        return isinstance(item, str) and item in container
    if isinstance(container, list | tuple):
        return item in container
    if isinstance(container, Mapping):
        try:
            return item in container
        except TypeError:  # an unhashable item (a list, a mapping) is no key
            return False
    return None


def compare(op: str, a: Any, b: Any) -> bool:
    """``a <op> b`` with the language's semantics (never raises)."""
    if op == "==":
        return bool(a == b)
    if op == "!=":
        return bool(a != b)
    if op in ("in", "not in"):
        found = _contains(b, a)
        if found is None:
            return False
        return found if op == "in" else not found
    if not comparable(a, b):
        return False
    if op == "<":
        return bool(a < b)
    if op == "<=":
        return bool(a <= b)
    if op == ">":
        return bool(a > b)
    return bool(a >= b)


def _term_eval(t: Term) -> Eval:
    if isinstance(t, Var):
        return _lookup(t.path)
    value = list(t.values) if isinstance(t, ListLit) else t.value
    return lambda env: value


def _compile(node: Node) -> Eval:
    if isinstance(node, Const):
        value = node.value
        return lambda env: value
    if isinstance(node, Truth):
        get = _lookup(node.var.path)
        return lambda env: bool(get(env))
    if isinstance(node, Not):
        inner = _compile(node.item)
        return lambda env: not inner(env)
    if isinstance(node, And):
        parts = [_compile(i) for i in node.items]
        if len(parts) == 2:
            first, second = parts
            return lambda env: bool(first(env) and second(env))
        return lambda env: all(p(env) for p in parts)
    if isinstance(node, Or):
        parts = [_compile(i) for i in node.items]
        return lambda env: any(p(env) for p in parts)
    fast = _compile_name_vs_literal(node)
    if fast is not None:
        return fast
    left, right, op = _term_eval(node.left), _term_eval(node.right), node.op
    return lambda env: compare(op, left(env), right(env))


def _compile_name_vs_literal(node: Cmp) -> Eval | None:
    """Specialised closures for the common ``name == literal`` shapes (same semantics)."""
    if not isinstance(node.left, Var):
        return None
    get = _lookup(node.left.path)
    if isinstance(node.right, Lit) and node.op in ("==", "!="):
        const = node.right.value
        if node.op == "==":
            return lambda env: bool(get(env) == const)
        return lambda env: bool(get(env) != const)
    if isinstance(node.right, ListLit) and node.op in ("in", "not in"):
        values = list(node.right.values)
        if node.op == "in":
            return lambda env: get(env) in values
        return lambda env: get(env) not in values
    return None


class Condition:
    """A parsed condition: ``holds(env)`` evaluates it against a routing environment."""

    def __init__(
        self, text: str, *, where: str = "when", file: str | None = None, labels: bool = True
    ) -> None:
        self.text = text
        self.tree: Node = _Parser(text, where, file, labels).parse()
        self._eval = _compile(self.tree)

    def holds(self, env: Env) -> bool:
        return bool(self._eval(env))

    @property
    def evaluator(self) -> Eval:
        """The compiled test, ``env -> truthy`` (what ``holds`` calls)."""
        return self._eval

    def __repr__(self) -> str:
        return f"Condition({self.text!r})"


def parse_condition(
    text: str, *, where: str = "when", file: str | None = None, labels: bool = True
) -> Condition:
    """Parse ``text``; a :class:`ConfigError` names the file, field and problem.

    ``labels=False`` skips the refusal of a number compared with a label (a rules
    document journalled with a run, read back: checks added since it started do not
    apply, and such a test keeps its meaning, never holding)."""
    return Condition(text, where=where, file=file, labels=labels)
