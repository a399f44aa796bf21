"""The CLI's ``review resolve`` and ``review confirm`` respect live claims as the service does,
and always name a reviewer (``--reviewer``, ``$DISSENSUS_REVIEWER``, the login name)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cli_helpers import run_cli
from dissensus.errors import InputError
from dissensus.pipeline import decide, policy_from_dict
from dissensus.pipeline.review import REVIEWER_ENV, claim, find_item, reviewer_name
from dissensus.quoting import INVISIBLE
from dissensus.store import Journal
from pipeline_cases import as_panel, panel

POLICY = policy_from_dict({"reading": {"similarity": "tfidf", "theta_s": 0.3}})
NAMES = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs", "Cc", "Cf"]), max_size=12
).filter(lambda s: INVISIBLE.search(s) is None)
"""Names a reviewer may have (no control, format or other invisible characters)."""


@given(given_name=st.none() | NAMES, env=st.none() | NAMES, login=NAMES)
def test_the_reviewer_is_never_empty(given_name: str | None, env: str | None, login: str) -> None:
    environ = {} if env is None else {REVIEWER_ENV: env}
    if given_name is not None and not given_name.strip():
        with pytest.raises(InputError, match="--reviewer"):
            reviewer_name(given_name, environ, lambda: login)
        return
    name = reviewer_name(given_name, environ, lambda: login)
    assert name.strip() == name and name
    if given_name is not None:
        assert name == given_name.strip()
    elif env is not None and env.strip():
        assert name == env.strip()
    elif login.strip():
        assert name == login.strip()
    else:
        assert name.startswith("uid-") or name == "unnamed-reviewer"


@given(
    name=st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6).map(
        lambda s: "al" + s + "\u200bice"
    ),
    where=st.sampled_from(["given", "env"]),
)
def test_a_reviewer_name_with_control_or_invisible_characters_is_refused(
    name: str, where: str
) -> None:
    """The name is journalled and printed: an escape sequence or a zero-width space
    (``al\u200bice`` looks like ``alice``) is refused, naming where it came from."""
    given_name, environ = (name, {}) if where == "given" else (None, {REVIEWER_ENV: name})
    said = "--reviewer" if where == "given" else REVIEWER_ENV
    with pytest.raises(InputError, match=f"{said}.*may not hold control or invisible"):
        reviewer_name(given_name, environ, lambda: "login")
    with pytest.raises(InputError, match="at most 128"):
        reviewer_name("r" * 129, {}, lambda: "login")


def test_a_failing_login_lookup_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> str:
        raise OSError("no login name")

    monkeypatch.setattr("dissensus.pipeline.review.getpass.getuser", broken)
    assert reviewer_name(None, {}) == f"uid-{os.getuid()}"


def _journal_with_cases(tmp_path: Path) -> tuple[Path, str, str]:
    """A journal with one escalated case (its review id) and one automatic one (its ref)."""
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        escalated = decide(
            as_panel(
                panel(
                    "vc",
                    ["1", "2", "1"],
                    values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}],
                    reasoning=["Option 1 is right."] * 3,
                )
            ),
            POLICY,
            journal=journal,
            run_id="esc",
        )
        auto = decide(
            as_panel(panel("agree", ["1", "1", "1"], swap=["1", "1", "1"])),
            POLICY,
            journal=journal,
            run_id="auto",
        )
    assert escalated.review_id is not None
    assert auto.auto, auto.reason
    return path, escalated.review_id, f"auto.{auto.line}"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != REVIEWER_ENV}
    env.update(extra)
    return env


def test_cli_resolve_respects_a_live_claim(tmp_path: Path) -> None:
    path, review_id, _ = _journal_with_cases(tmp_path)
    with Journal(path) as journal:
        claim(journal, review_id, "alice", ttl=600)
    base = ["review", "resolve", review_id, "--decision", "1", "--note", "n", "--journal", path]

    for env, args in (
        (_env(), ["--reviewer", "bob"]),
        (_env(**{REVIEWER_ENV: "bob"}), []),
        (_env(), []),  # the login name (not alice)
    ):
        refused = run_cli(*base, *args, env=env)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "claimed by alice" in refused.stderr
        with Journal(path) as journal:
            assert find_item(journal, review_id).resolution is None

    blank = run_cli(*base, "--reviewer", " ", env=_env())
    assert blank.returncode == 2 and "--reviewer" in blank.stderr

    done = run_cli(*base, env=_env(**{REVIEWER_ENV: "alice"}))
    assert done.returncode == 0, done.stderr
    with Journal(path) as journal:
        resolution = find_item(journal, review_id).resolution
        assert resolution is not None and resolution.reviewer == "alice"
        assert journal.current_claim(review_id) is None


def test_cli_resolve_without_a_claim_names_the_login(tmp_path: Path) -> None:
    path, review_id, _ = _journal_with_cases(tmp_path)
    done = run_cli(
        "review", "resolve", review_id, "--decision", "2", "--note", "n", "--journal", path,
        env=_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with Journal(path) as journal:
        resolution = find_item(journal, review_id).resolution
        assert resolution is not None and resolution.reviewer == reviewer_name(None, {})


def test_cli_confirm_respects_a_live_claim(tmp_path: Path) -> None:
    path, _, ref = _journal_with_cases(tmp_path)
    with Journal(path) as journal:
        journal.claim(ref, "alice", 600, run_id="auto")
    base = ["review", "confirm", ref, "--note", "checked", "--journal", path]
    refused = run_cli(*base, "--reviewer", "bob", env=_env())
    assert refused.returncode == 1 and "claimed by alice" in refused.stderr
    with Journal(path) as journal:
        assert journal.get("auto", f"confirm/{ref.split('.')[1]}") is None
    done = run_cli(*base, env=_env(**{REVIEWER_ENV: "alice"}))
    assert done.returncode == 0, done.stderr
    with Journal(path) as journal:
        audit = journal.get("auto", f"confirm/{ref.split('.')[1]}")
        assert audit is not None and audit.payload["reviewer"] == "alice"


def test_the_cli_claims_renews_and_releases_a_case(tmp_path: Path) -> None:
    """A claim taken with ``review claim`` holds the case against another reviewer's
    resolve (and claim); claiming again renews it; ``--release`` frees it."""
    path, review_id, _ = _journal_with_cases(tmp_path)
    env = _env()

    def as_(who: str, *args: str) -> tuple[int, str]:
        res = run_cli("review", *args, "--reviewer", who, "--journal", str(path), env=env)
        return res.returncode, res.stdout + res.stderr

    code, out = as_("alice", "claim", review_id, "--ttl", "600")
    assert code == 0 and "for alice until" in out
    with Journal(path) as journal:
        first = journal.current_claim(review_id)
    assert first is not None and first.who == "alice"
    code, out = as_("bob", "claim", review_id)
    assert code == 1 and "claimed by alice" in out
    code, out = as_("bob", "resolve", review_id, "--decision", "2", "--note", "mine")
    assert code == 1 and "claimed by alice" in out
    assert as_("alice", "claim", review_id, "--ttl", "900")[0] == 0  # renewed, later expiry
    with Journal(path) as journal:
        renewed = journal.current_claim(review_id)
    assert renewed is not None and renewed.expires > first.expires
    code, out = as_("bob", "claim", review_id, "--release")  # not bob's: refused, kept
    assert code == 1 and "claimed by alice" in out and "only alice can release" in out
    assert as_("bob", "resolve", review_id, "--decision", "2", "--note", "n")[0] == 1
    assert as_("alice", "claim", review_id, "--release")[0] == 0
    code, out = as_("bob", "resolve", review_id, "--decision", "2", "--note", "free now")
    assert code == 0, out
    code, out = as_("alice", "claim", review_id)
    assert code == 1 and "resolved" in out


def test_release_says_what_it_released(tmp_path: Path) -> None:
    """``--release`` of someone else's live claim is exit 1 naming the holder and leaves
    the claim; with no claim of one's own it says so (exit 0, ``released: false``)."""
    import json

    path, review_id, _ = _journal_with_cases(tmp_path)
    env = _env()

    def release(who: str, *extra: str) -> tuple[int, str, str]:
        res = run_cli(
            "review", "claim", review_id, "--release", "--reviewer", who, "--journal", str(path),
            *extra, env=env,
        )  # fmt: skip
        return res.returncode, res.stdout, res.stderr

    code, out, err = release("bob")
    assert (code, out) == (0, f"no claim of bob to release on {review_id}\n"), err
    with Journal(path) as journal:
        claim(journal, review_id, "alice", ttl=600)
    for extra in ((), ("--json",)):
        code, out, err = release("bob", *extra)
        assert code == 1 and out == "", out
        assert err.startswith("error: ") and "claimed by alice" in err
        assert len(err.strip().splitlines()) == 1
        with Journal(path) as journal:
            held = journal.current_claim(review_id)
        assert held is not None and held.who == "alice"
    code, out, _ = release("alice", "--json")
    assert code == 0 and json.loads(out) == {"review_id": review_id, "released": True}
    code, out, _ = release("alice", "--json")
    assert code == 0 and json.loads(out) == {"review_id": review_id, "released": False}
    with Journal(path) as journal:
        assert journal.current_claim(review_id) is None


def test_cli_resolve_reads_an_option_typed_as_review_show_prints_it(tmp_path: Path) -> None:
    """``--decision 'yes\\x20'``, as ``review show`` prints the option ``yes ``, journalled
    a third answer outside the options; it is the option ``yes `` now."""
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        got = decide(as_panel(panel("ws", ["yes", "yes ", "yes", "yes "])), POLICY, journal=journal)
    assert got.review_id is not None
    shown = run_cli("review", "show", got.review_id, "--journal", path, env=_env())
    assert "yes\\x20" in shown.stdout, shown.stdout
    done = run_cli(
        "review", "resolve", got.review_id, "--decision", "yes\\x20", "--note", "n",
        "--journal", path, env=_env(DISSENSUS_REVIEWER="alice"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "none of the case's options" not in done.stderr
    with Journal(path) as journal:
        record = find_item(journal, got.review_id).resolution
        assert record is not None and record.decision == "yes "


def test_cli_resolve_refuses_a_literal_option_that_reads_as_another(tmp_path: Path) -> None:
    """``--decision 'yes\\x20'`` beside options ``yes `` (printed ``yes\\x20``) and the
    literal ``yes\\x20`` journalled the literal option; it is exit 2 naming both, nothing
    journalled, and each option is named on its own as the message says."""
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        got = decide(
            as_panel(panel("lit", ["yes ", "yes ", "yes\\x20", "no"])), POLICY, journal=journal
        )
    assert got.review_id is not None
    env = _env(DISSENSUS_REVIEWER="alice")

    def resolve(decision: str) -> tuple[int, str]:
        done = run_cli(
            "review", "resolve", got.review_id, "--decision", decision, "--note", "n",
            "--journal", path, env=env,
        )  # fmt: skip
        return done.returncode, done.stderr

    code, err = resolve("yes\\x20")
    assert code == 2, err
    assert "names more than one option" in err and "'yes '" in err and "yes\\\\x20" in err, err
    with Journal(path) as journal:
        assert find_item(journal, got.review_id).resolution is None
    code, err = resolve("yes\\\\x20")
    assert code == 0, err
    with Journal(path) as journal:
        record = find_item(journal, got.review_id).resolution
        assert record is not None and record.decision == "yes\\x20"
