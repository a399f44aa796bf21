"""The Inspect reducer's journal URL is recorded in the eval log without its password.

Inspect records a reducer's creation parameters in the eval log (the scorer's
``reducer.params``, each sample's ``scorer_args``); ``dissensus_reducer(journal=
"postgresql://user:PASSWORD@host/db")`` put the password there in clear, in a file that
is shared and viewed. The recorded ``journal`` is masked as every message names it; the
reducer still decides into the journal the URL names.
"""

from __future__ import annotations

from typing import Any

import pytest

from store_backends import pg_schema, pg_url

SECRET = "S3cretPW-never-logged"


def _with_password(url: str) -> str:
    """``url`` with a password (the test server trusts loopback: it is sent, not checked)."""
    scheme, _, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not at:
        userinfo, host = "postgres", rest
    return f"{scheme}://{userinfo.partition(':')[0]}:{SECRET}@{host}"


@pytest.mark.parametrize("name", ["dissensus", "dissensus/dissensus"])
def test_the_recorded_journal_hides_its_password(name: str) -> None:
    pytest.importorskip("inspect_ai")
    from inspect_ai._util.registry import registry_params
    from inspect_ai.scorer import Score

    from dissensus.integrations.inspect import _namespaced_reducer, dissensus_reducer
    from dissensus.store import open_journal

    make = dissensus_reducer if name == "dissensus" else _namespaced_reducer

    with pg_schema(_with_password(pg_url())) as url:
        policy: dict[str, Any] = {"reading": {"similarity": "tfidf", "theta_s": 0.3}}
        reducer = make(graders=["g1", "g2"], policy=policy, journal=url)
        recorded = registry_params(reducer)
        assert SECRET not in repr(recorded)
        assert recorded["journal"].startswith("postgresql://") and ":***@" in recorded["journal"]
        score = reducer([Score(value="C", explanation="c"), Score(value="I", explanation="i")])
        assert score.answer != "error", score.explanation
        with open_journal(url) as journal:
            assert len(journal.runs()) == 1  # decided into the journal the URL names
