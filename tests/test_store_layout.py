"""The journal's layout: one facade over services, its interface and old imports kept."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dissensus.store as store
from dissensus.store import base, event_types  # noqa: TID251 - the old path still imports
from dissensus.store.journal import Journal, NewEvent, open_journal
from dissensus.store.log import EventLog

# The facade's interface before the journal was split by job: every caller relies on it.
JOURNAL_METHODS = {
    "acquire_run_lock",
    "append",
    "append_batch",
    "claim",
    "close",
    "create_run",
    "current_claim",
    "current_claims",
    "event_at",
    "events",
    "events_at",
    "events_of_type",
    "get",
    "head",
    "read",
    "rebuild_review_index",
    "release_claim",
    "release_run_lock",
    "review_entries",
    "review_index_agrees",
    "review_index_differences",
    "run",
    "runs",
    "schema",
    "seal",
    "transaction",
    "verify",
}
JOURNAL_ATTRIBUTES = {"path", "busy_timeout", "after_append", "signer"}
# Methods added since, on top of that interface.
JOURNAL_ADDED = {
    "count_of_type",
    "cases_with_events",
    "create_deferred",
    "defer_run",
    "deferred",
    "events_after",
    "follow",
    "handed",
    "lock_name",
    "newest_runs",
    "refs_after",
    "run_lock_holder",
    "run_status",
    "run_statuses",
}


def test_the_facade_keeps_its_interface(journal_target: str) -> None:
    public = {n for n, _ in inspect.getmembers(Journal) if not n.startswith("_")}
    assert public == JOURNAL_METHODS | JOURNAL_ADDED | {"signer"}
    with open_journal(journal_target) as journal:
        assert type(journal) is Journal  # no subclass per back end: the back end is a part
        for name in JOURNAL_ATTRIBUTES:
            assert hasattr(journal, name), name
        assert journal.signer is None and journal.after_append is None
        assert journal.busy_timeout > 0
        assert isinstance(journal.path, str) and journal.path


def test_the_constructor_keeps_its_arguments() -> None:
    params = inspect.signature(Journal.__init__).parameters
    assert list(params) == [
        "self",
        "target",
        "after_append",
        "synchronous",
        "busy_timeout",
        "signer",
    ]
    assert all(params[n].kind is inspect.Parameter.KEYWORD_ONLY for n in list(params)[2:])


@pytest.mark.parametrize("name", sorted(base.__all__))
def test_every_name_of_the_old_module_still_imports_as_the_same_object(name: str) -> None:
    value = getattr(base, name)
    owner = getattr(value, "__module__", None)
    if owner and owner.startswith("dissensus.store.") and owner != "dissensus.store.base":
        assert getattr(importlib.import_module(owner), name) is value
    if name in store.__all__:
        assert getattr(store, name) is value


def test_the_package_exports_what_it_did() -> None:
    assert set(store.__all__) == {
        "DEFAULT_JOURNAL",
        "GENESIS",
        "SEAL_TYPE",
        "CaseClosed",
        "Claim",
        "ClaimConflict",
        "Event",
        "Journal",
        "JournalBusy",
        "JournalConflict",
        "JournalError",
        "JournalReadOnly",
        "IndexEntry",  # ReviewEntry before: still imports, deprecated
        "RunExists",
        "RunInfo",
        "RunLock",
        "UnknownRun",
        "VerifyReport",
        "canonical",
        "chain_hash",
        "is_postgres_url",
        "journal_option",
        "journal_path",
        "mask_url",
        "open_journal",
        "sha256_text",
    }


def _takes_a_log(log: EventLog) -> EventLog:
    return log


keys = st.lists(st.sampled_from([f"k{i}" for i in range(6)]), min_size=1, max_size=5)


@settings(max_examples=25, deadline=None)
@given(batches=st.lists(keys, min_size=1, max_size=4))
def test_the_facade_and_its_log_append_alike(batches: list[list[str]]) -> None:
    """Appends through the facade (an EventLog) write every new key once, in order, each
    reported once after its commit, and the chain verifies."""
    seen: list[Any] = []
    with Journal(":memory:", after_append=seen.append) as journal:
        log = _takes_a_log(journal)
        journal.create_run("r", kind="test", meta={})
        stored: list[str] = []
        for batch in batches:
            news = [NewEvent(event_types.CASE_RECORD, {"k": k}, k) for k in batch]
            out = log.append_batch("r", news)
            assert [e.key for e in out] == batch
            stored.extend(k for k in dict.fromkeys(batch) if k not in stored)
        assert [e.key for e in log.read("r")] == stored
        assert [e.key for e in seen] == stored
        assert log.head("r").n_events == len(stored)
        assert journal.verify("r").ok
