"""Budget: a pot of model calls, tokens and (optionally) money, checked before every attempt.

Every model call goes through one client that owns the budget, and every attempt is
counted (``docs/llm.md``). Choices this module makes:

* ``max_calls`` bounds *attempts*, not logical calls: every request sent to a model
  (retries and re-asks included) is billed by the provider, so every one counts.
* Before each attempt the client *reserves* its worst case and the budget refuses the
  attempt with :class:`BudgetExceeded` when ``spent + reserved + this`` could pass a
  limit. The worst case is one call, ``estimate_tokens(prompt) + max_tokens`` tokens,
  and the price of those tokens. When the request sets no ``max_tokens`` and a token or
  cost limit is set, the client sends ``completion_reserve`` as ``max_tokens`` so the
  reservation is a real cap. After the attempt the reservation is released and the
  *reported* usage is charged. Servers that report more prompt tokens than the estimate
  (about four characters a token) can therefore overrun a token limit by that error;
  offline models and the loopback server use the same estimate and never do.
* An attempt is charged when it is sent: its reservation counts until the attempt
  ends (answered, failed, timed out or cancelled), and then the attempt is charged
  whatever its outcome, with the tokens the server reported when it answered (an
  answer that then fails schema validation included: it was billed). :func:`attempt_hook` lets the durable layer journal each
  attempt as it is sent (see :mod:`dissensus.pipeline.durable`).
* A refusal's message names the limit and the refused attempt only, never what is
  spent or in flight at that moment (which depends on timing): two runs of the same
  input refuse with the same words.
* One :class:`Budget` object may be shared by several clients: it is the pot, each
  client draws from it. Reservation is guarded by a lock, so threads may share it too.
* Cost uses a price table in US dollars per million tokens. ``DEFAULT_PRICES`` lists a
  few OpenAI models (list prices, mid-2025); pass ``prices=`` to use your own. A model
  is priced by exact id, else by the longest table key it starts with (so
  ``gpt-4o-mini-2024-07-18`` is priced as ``gpt-4o-mini``). Setting ``max_cost`` for a
  model without a price is a configuration error, raised when the client is made.
* Limits and prices are finite and non-negative. ``max_calls``, ``max_tokens``,
  ``max_cost`` and ``completion_reserve`` that are NaN, infinite or negative (and a
  :class:`Price` whose ``input_per_mtok`` or ``output_per_mtok`` is) are a
  :class:`ConfigError` naming the field, raised when the object is made: every
  comparison with NaN is false, so a NaN limit or price let every attempt through, an
  infinite one turned the limit off, and a negative price made spending earn budget.
  ``None`` is the one way to say "no limit".
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from dissensus.errors import ConfigError
from dissensus.llm.base import BudgetExceeded
from dissensus.types import Usage, trusted

__all__ = [
    "DEFAULT_PRICES",
    "Budget",
    "Price",
    "Reservation",
    "Tally",
    "attempt_hook",
    "call_spent",
    "notify_attempt",
]

_ATTEMPT_HOOK: ContextVar[Callable[[], None] | None] = ContextVar(
    "dissensus_attempt_hook", default=None
)


@contextmanager
def attempt_hook(hook: Callable[[], None]) -> Iterator[None]:
    """Call ``hook`` (in this context) right before each attempt is sent to a backend.

    The durable layer journals every attempt this way, so a resumed run charges the
    attempts a killed or cancelled process sent and never learnt the outcome of.
    """
    token = _ATTEMPT_HOOK.set(hook)
    try:
        yield
    finally:
        _ATTEMPT_HOOK.reset(token)


_CALL_SPENT: ContextVar[Tally | None] = ContextVar("dissensus_call_spent", default=None)


def notify_attempt(spent: Tally | None = None) -> None:
    """Tell the current :func:`attempt_hook`, if any, that an attempt is being sent;
    ``spent`` is what the call spent before it (read by the hook with :func:`call_spent`)."""
    hook = _ATTEMPT_HOOK.get()
    if hook is not None:
        token = _CALL_SPENT.set(spent)
        try:
            hook()
        finally:
            _CALL_SPENT.reset(token)


def call_spent() -> Usage:
    """Inside an :func:`attempt_hook`: what the call whose attempt is being sent has spent
    before it (its earlier attempts, and the tokens the server reported for the answers
    it gave, such as an answer that failed schema validation and is being re-asked);
    zero elsewhere. The durable layer journals it with the attempt, so the tokens of a
    call cut off later (a kill, a deadline) still count."""
    spent = _CALL_SPENT.get()
    return spent.usage() if spent is not None else Usage()


@dataclass(slots=True)
class Tally:
    """Plain running counters (cheaper to bump than a pydantic :class:`Usage`)."""

    calls: int = 0
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def bump(self, *, calls: int, prompt_tokens: int, completion_tokens: int, cost: float) -> None:
        """Count one attempt (and ``calls`` logical calls)."""
        self.calls += calls
        self.attempts += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.cost += cost

    def usage(self) -> Usage:
        """A :class:`Usage` snapshot (built unvalidated: these counters are the client's own
        ints and float, so validating them would only cost)."""
        fields = {
            "calls": self.calls,
            "attempts": self.attempts,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost": self.cost,
        }
        return trusted(Usage, fields)


def _check_limit(name: str, value: object) -> None:
    """:class:`ConfigError` naming ``name`` unless ``value`` is a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a number, got {value!r}", field=name)
    if not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value}", field=name)
    if value < 0:
        raise ConfigError(f"{name} must be >= 0, got {value}", field=name)


class Price(BaseModel):
    """Price of one model in US dollars per million tokens."""

    model_config = ConfigDict(frozen=True)

    input_per_mtok: float
    """Dollars per million prompt tokens."""
    output_per_mtok: float
    """Dollars per million completion tokens."""

    @field_validator("input_per_mtok", "output_per_mtok")
    @classmethod
    def _finite(cls, value: float, info: ValidationInfo) -> float:
        _check_limit(info.field_name or "price", value)
        return value

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """Dollars for the given token counts."""
        return (
            prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok
        ) / 1e6


DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": Price(input_per_mtok=2.50, output_per_mtok=10.00),
    "gpt-4o-mini": Price(input_per_mtok=0.15, output_per_mtok=0.60),
    "gpt-4.1": Price(input_per_mtok=2.00, output_per_mtok=8.00),
    "gpt-4.1-mini": Price(input_per_mtok=0.40, output_per_mtok=1.60),
    "gpt-4.1-nano": Price(input_per_mtok=0.10, output_per_mtok=0.40),
}
"""List prices of a few OpenAI chat models (USD per million tokens, mid-2025)."""


@dataclass(frozen=True)
class Reservation:
    """What one attempt reserved: released when the attempt ends."""

    calls: int
    tokens: int
    cost: float


@dataclass
class Budget:
    """Limits on model use, and what has been spent against them.

    >>> b = Budget(max_calls=2)
    >>> r = b.reserve(model="m", prompt_tokens=10, completion_tokens=5)
    >>> b.settle(r, model="m", prompt_tokens=10, completion_tokens=5)
    0.0
    >>> b.spent.attempts
    1
    """

    max_calls: int | None = None
    """Maximum attempts (every request sent, retries and re-asks included); None = no limit."""
    max_tokens: int | None = None
    """Maximum prompt + completion tokens; None = no limit."""
    max_cost: float | None = None
    """Maximum cost in dollars, priced by ``prices``; None = no limit."""
    prices: dict[str, Price] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    """Price table: model id (or id prefix) -> price. Prefix matches are cached per model
    (the cache is dropped when entries are added or removed)."""
    completion_reserve: int = 1024
    """Completion tokens reserved (and sent as ``max_tokens``) when a request sets none."""
    _spent: Tally = field(default_factory=Tally, repr=False)
    _reserved: list[float] = field(default_factory=lambda: [0, 0, 0.0], repr=False)
    _price_cache: dict[str, tuple[int, Price | None]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("max_calls", "max_tokens", "max_cost", "completion_reserve"):
            value = getattr(self, name)
            if value is not None:
                _check_limit(name, value)
        for model, price in self.prices.items():
            if not isinstance(price, Price):
                raise ConfigError(
                    f"the price of {model!r} must be a Price, got {type(price).__name__}",
                    field=f"prices.{model}",
                )
        if self.completion_reserve < 1:
            raise ConfigError("completion_reserve must be >= 1", field="completion_reserve")

    @property
    def spent(self) -> Usage:
        """Attempts, tokens and cost charged so far (``calls`` stays 0; clients count calls)."""
        with self._lock:
            return self._spent.usage()

    @property
    def limits_tokens(self) -> bool:
        """Whether a token or cost limit needs a completion cap on every request."""
        return self.max_tokens is not None or self.max_cost is not None

    def price_for(self, model: str) -> Price | None:
        """Price of ``model``: exact id, else the longest table key it starts with."""
        if model in self.prices:
            return self.prices[model]
        cached = self._price_cache.get(model)
        if cached is not None and cached[0] == len(self.prices):
            return cached[1]
        keys = [k for k in self.prices if model.startswith(k)]
        price = self.prices[max(keys, key=len)] if keys else None
        self._price_cache[model] = (len(self.prices), price)
        return price

    def check_model(self, model: str) -> None:
        """Raise :class:`ConfigError` when a cost limit is set and ``model`` has no price."""
        if self.max_cost is not None and self.price_for(model) is None:
            raise ConfigError(
                f"max_cost is set but model {model!r} has no price; pass prices={{...}}",
                field="prices",
            )

    def _cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        price = self.price_for(model)
        return price.cost(prompt_tokens, completion_tokens) if price else 0.0

    def reserve(self, *, model: str, prompt_tokens: int, completion_tokens: int) -> Reservation:
        """Reserve one attempt's worst case, or raise :class:`BudgetExceeded`."""
        cost = self._cost(model, prompt_tokens, completion_tokens)
        tokens = prompt_tokens + completion_tokens
        with self._lock:
            spent = self._spent
            calls_r, tokens_r, cost_r = self._reserved
            # The messages name the limit and this attempt only: what is spent and in
            # flight at this moment depends on timing, and the message ends up in records.
            if self.max_calls is not None and spent.attempts + calls_r + 1 > self.max_calls:
                raise BudgetExceeded(
                    f"call budget exhausted: all {self.max_calls} attempts allowed are spent "
                    "or in flight"
                )
            if (
                self.max_tokens is not None
                and spent.total_tokens + tokens_r + tokens > self.max_tokens
            ):
                raise BudgetExceeded(
                    f"token budget exhausted: this attempt may use {tokens} tokens, more than "
                    f"the limit of {self.max_tokens} leaves"
                )
            if self.max_cost is not None and spent.cost + cost_r + cost > self.max_cost:
                raise BudgetExceeded(
                    f"cost budget exhausted: this attempt may cost ${cost:.6f}, more than the "
                    f"limit of ${self.max_cost:.6f} leaves"
                )
            self._reserved = [calls_r + 1, tokens_r + tokens, cost_r + cost]
        return Reservation(calls=1, tokens=tokens, cost=cost)

    def charge(self, *, attempts: int = 0, tokens: int = 0) -> None:
        """Charge spend made elsewhere, unchecked: ``attempts`` attempts and ``tokens``
        tokens (counted as prompt tokens), e.g. what another process may have spent for
        this budget's run (a Ray block's open reservation)."""
        with self._lock:
            spent = self._spent
            spent.attempts += attempts
            spent.prompt_tokens += tokens

    def release(self, reservation: Reservation) -> None:
        """Release ``reservation`` without charging anything: its attempt was never sent
        (the attempt hook refused it, e.g. past the run's deadline)."""
        with self._lock:
            self._unreserve(reservation)

    def _unreserve(self, reservation: Reservation) -> None:
        """Take ``reservation`` off what is in flight (the lock held)."""
        calls_r, tokens_r, cost_r = self._reserved
        self._reserved = [
            calls_r - reservation.calls,
            tokens_r - reservation.tokens,
            max(0.0, cost_r - reservation.cost),
        ]

    def settle(
        self, reservation: Reservation, *, model: str, prompt_tokens: int, completion_tokens: int
    ) -> float:
        """Release ``reservation`` and charge what the attempt used; return its cost."""
        cost = self._cost(model, prompt_tokens, completion_tokens)
        with self._lock:
            self._unreserve(reservation)
            self._spent.bump(
                calls=0, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, cost=cost
            )
        return cost
