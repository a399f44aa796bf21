"""Function agents for CONCORD (``docs/concord.md``): plain Python callables, e.g. a cost model.

A function agent is three callables named ``module:function`` in the problem file:

* ``score(outcome: Outcome, view: NegotiationView) -> float`` (required): the raw score
  of one outcome on the agent's private scale;
* ``propose(view) -> Outcome | str | dict | None`` (optional);
* ``repair(view) -> Outcome | str | dict | None`` (optional).

Each may be synchronous or ``async``. A ``str`` is the text of a new outcome; a
``dict`` needs ``text`` and may carry ``id``; ``None`` passes.

Choices this module makes:

* Without ``propose`` the agent proposes the pool option it scores best; without
  ``repair`` it repairs with the untabled pool option it scores best, provided that
  beats its score of the leader (the table agent's rule), else it passes. Which way is
  better is read from its own scores of the two anchors.
* **Resolution of ``module:function``** is :func:`dissensus.loading.load_callable`:
  a module beside the problem file is imported by file path, never through ``sys.path``.
* **Empty text passes.** A ``propose`` or ``repair`` returning an empty or
  whitespace-only text (``""``, ``"   "``, ``{"text": " "}``, an ``Outcome`` whose text
  is whitespace) passes, as an LLM agent's empty text does. Any other unusable return
  (``{"id": 5, ...}``, a dict whose ``text`` is not a string: ``{"text": None}`` is
  never the plan "None") is a one-line fault of that call.
* **Score per outcome.** ``score`` is called once per outcome; a real number is a score
  (a NumPy number and a ``Fraction`` included, a ``bool`` not:
  :func:`~dissensus.concord.scale.real`); an outcome whose call raises or returns
  something other than a number is a
  :class:`~dissensus.concord.agent.ScoreFault` in its place, so only that evaluation is
  a fault (the other outcomes of the protocol's call keep their scores).
* **Exits.** A callable that raises ``SystemExit`` or ``KeyboardInterrupt`` in a worker
  thread hands it to the awaiting coroutine like any other exception (a thread would
  otherwise die silently and the call never settle); the protocol records
  ``SystemExit`` as the agent's fault and treats ``KeyboardInterrupt`` as Ctrl-C.
* **Timeouts.** With ``timeout`` set (or ``threaded=True``, which the CLI sets when a
  deadline is given), a synchronous callable runs in a worker thread so the protocol can
  stop waiting for it; a thread cannot be killed, so an abandoned call finishes in the
  background (a daemon thread: it never keeps the process alive). Otherwise it runs
  inline.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from dissensus.concord.agent import AgentIdentity, NegotiationView, Outcome, ScoreFault
from dissensus.concord.scale import exception_line, real

__all__ = ["FunctionAgent", "as_outcome"]


async def _in_daemon_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn`` in a daemon thread: an abandoned call never holds the process open."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def work() -> None:
        error: BaseException | None = None
        try:
            value = fn(*args)
        except BaseException as exc:  # handed on: a fault, an exit (SystemExit) or Ctrl-C
            value, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop may be gone after a timeout
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=work, name="dissensus-fn", daemon=True).start()
    return await future


def as_outcome(value: object) -> Outcome | None:
    """Normalise what a callable returned into an :class:`Outcome` (``None`` passes, and
    so does an empty or whitespace-only text, as an LLM agent's empty text does)."""
    if value is None:
        return None
    if isinstance(value, Outcome):
        return value if value.text.strip() else None
    given_id: object = None
    if isinstance(value, str):
        text = value
    elif isinstance(value, dict):
        given, given_id = value.get("text"), value.get("id")
        if not isinstance(given, str):  # never the plan "None" or "5"
            raise TypeError(f"an outcome's 'text' must be a string, got {type(given).__name__}")
        text = given
    else:
        raise TypeError(f"expected an outcome, text, dict or None, got {type(value).__name__}")
    if not text.strip():
        return None
    try:
        return Outcome(id=given_id, text=text)
    except ValidationError as exc:  # one line, as every fault message
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"not an outcome: {where}: {first['msg']}") from None


class FunctionAgent(AgentIdentity):
    """An agent made of Python callables."""

    kind = "function"
    uses_model = False

    def __init__(
        self,
        agent_id: str,
        score: Callable[..., Any],
        *,
        propose: Callable[..., Any] | None = None,
        repair: Callable[..., Any] | None = None,
        timeout: float | None = None,
        threaded: bool = False,
    ) -> None:
        super().__init__(agent_id, timeout=timeout)
        self._threaded = threaded or timeout is not None
        self._score = score
        self._propose = propose
        self._repair = repair

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        if inspect.iscoroutinefunction(fn):
            return await fn(*args)
        if not self._threaded:
            result = fn(*args)
        else:
            result = await _in_daemon_thread(fn, *args)
        if inspect.isawaitable(result):
            return await result
        return result

    async def _raw(self, outcome: Outcome, view: NegotiationView) -> float:
        """The score callable's number for ``outcome`` (raises when it gives none)."""
        value = await self._call(self._score, outcome, view)
        number = real(value)
        if number is None:
            raise TypeError(f"score must be a number, got {type(value).__name__}")
        return number

    async def score(
        self, outcomes: Sequence[Outcome], view: NegotiationView
    ) -> Sequence[float | ScoreFault]:
        values: list[float | ScoreFault] = []
        for outcome in outcomes:
            try:
                values.append(await self._raw(outcome, view))
            except Exception as exc:  # that evaluation alone is a fault
                values.append(ScoreFault(message=exception_line(exc)))
        return values

    async def _sign(self, view: NegotiationView) -> float:
        if view.rejected is None or view.ideal is None:
            return 1.0
        rej = await self._raw(view.rejected, view)
        ideal = await self._raw(view.ideal, view)
        return 1.0 if ideal >= rej else -1.0

    async def _best_option(
        self, view: NegotiationView, pool: Sequence[Outcome], above: float | None
    ) -> Outcome | None:
        sign = await self._sign(view)
        best: Outcome | None = None
        best_score = None if above is None else sign * above
        for option in pool:
            value = sign * await self._raw(option, view)
            if best_score is None or value > best_score:
                best, best_score = option, value
        return best

    async def propose(self, view: NegotiationView) -> Outcome | None:
        if self._propose is not None:
            return as_outcome(await self._call(self._propose, view))
        return await self._best_option(view, view.options, None)

    async def repair(self, view: NegotiationView) -> Outcome | None:
        if self._repair is not None:
            return as_outcome(await self._call(self._repair, view))
        leader = view.leader_candidate()
        current = None
        if leader is not None:
            current = await self._raw(Outcome(id=leader.id, text=leader.text), view)
        tabled = set(view.tabled)
        return await self._best_option(
            view, [o for o in view.options if o.id not in tabled], current
        )
