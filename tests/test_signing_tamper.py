"""Signing against tampering: any change to a signed document or to a sealed run, the
signature object itself included, is never ``signed``."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from dissensus.signing import PublicKey, Signer, document_status, sign_document
from dissensus.store import GENESIS, SEAL_TYPE, Journal, canonical, chain_hash
from store_backends import raw

KEY = Signer.from_pem(
    "-----BEGIN PRIVATE KEY-----\n"
    "MC4CAQAwBQYDK2VwBCIEIBtL8rPZ9ncGYjcbyS9Yd0CbmT6VoO2ZkW3Pq1n4xmJc\n"
    "-----END PRIVATE KEY-----\n"
)
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
PACKET: dict[str, Any] = {
    "schema_version": "1",
    "task_id": "t",
    "question": "Which?",
    "status": "complete",
    "path": "converged",
    "residual_objections": [],
    "minority_report": [{"option": "o2", "holders": ["p1"], "confidence": 0.25}],
    "scores": {"p1": {"o1": 0.5, "o2": 0.75}},
}
SIGNED = sign_document(PACKET, KEY)


def _other_spellings(value: str) -> list[str]:
    """Every string one base64 character away from ``value``."""
    return [value[:i] + c + value[i + 1 :] for i in range(len(value)) for c in B64 if c != value[i]]


def test_every_other_spelling_of_a_signature_value_is_invalid() -> None:
    """Base64 decoders ignore the last character's unused bits: a signature value with
    any one character changed (those bits too) does not verify."""
    value = SIGNED["signature"]["value"]
    for other in _other_spellings(value):
        doc = {**SIGNED, "signature": {**SIGNED["signature"], "value": other}}
        assert document_status(doc, KEY.public_key) == "invalid", other


@pytest.mark.parametrize(
    "signature",
    [
        {**SIGNED["signature"], "signer": "someone else"},
        {**SIGNED["signature"], "key_id": "0" * 16},
        {k: v for k, v in SIGNED["signature"].items() if k != "key_id"},
        {**SIGNED["signature"], "value": SIGNED["signature"]["value"].rstrip("=")},
        {**SIGNED["signature"], "value": " " + SIGNED["signature"]["value"]},
        {**SIGNED["signature"], "value": base64.b64encode(b"\0" * 65).decode()},
        {**SIGNED["signature"], "value": 5},
        {**SIGNED["signature"], "alg": "Ed25519"},
    ],
)
def test_a_changed_signature_object_is_invalid(signature: dict[str, Any]) -> None:
    """A field added to the signature, its key id edited or dropped, its value spelled
    another way: the document changed, so it is ``invalid``, not ``signed``."""
    assert document_status({**SIGNED, "signature": signature}, KEY.public_key) == "invalid"


@seed(20261205)
@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_single_character_change_of_a_signed_packet_is_not_signed(data: Any) -> None:
    """One character of the signed packet's JSON text replaced: if it still reads as
    another document, that document is not ``signed``."""
    text = json.dumps(SIGNED)
    i = data.draw(st.integers(0, len(text) - 1))
    c = data.draw(st.sampled_from(sorted(set(B64 + '0123456789.-e"{}[],: _=') - {text[i]})))
    changed = text[:i] + c + text[i + 1 :]
    try:
        doc = json.loads(changed)
    except ValueError:
        return
    if doc == SIGNED or not isinstance(doc, dict):
        return
    assert document_status(doc, KEY.public_key) != "signed", (i, c)


def _sealed_run(target: str) -> list[Any]:
    with Journal(target, signer=KEY) as j:
        j.create_run("r", kind="t", meta={})
        for i in range(3):
            j.append("r", "e", {"v": i}, key=f"k{i}")
        j.append("r", "run.finished", {}, key="run/finished")
        return list(j.events("r"))


def _rechain(target: str, events: list[Any], seal_payload: dict[str, Any]) -> None:
    """Rewrite run ``r`` with its seal's payload replaced, every hash recomputed."""
    prev = GENESIS
    for e in events:
        payload = seal_payload if e.type == SEAL_TYPE else e.payload
        digest = chain_hash(prev, {**e.body(), "payload": payload})
        raw(
            target,
            "UPDATE events SET payload = ?, prev_hash = ?, hash = ? WHERE run_id = 'r' AND seq = ?",
            (canonical(payload), prev, digest, e.seq),
        )
        prev = digest
    raw(target, "UPDATE runs SET head_hash = ? WHERE run_id = 'r'", (prev,))


@seed(20261205)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_a_re_chained_seal_with_its_signature_changed_is_not_signed(
    tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    """Someone with write access changes one character of the last seal's signature (or
    adds to it) and recomputes every hash: the run is no longer ``signed``."""
    target = str(tmp_path_factory.mktemp("seal") / "j.sqlite")
    events = _sealed_run(target)
    seal = events[-1]
    assert seal.type == SEAL_TYPE
    signature = dict(seal.payload["signature"])
    value = signature["value"]
    how = data.draw(st.sampled_from(["value", "extra", "key_id"]))
    if how == "value":
        # The last characters first: those whose unused bits a decoder ignores.
        tail = [v for v in _other_spellings(value) if v[:-3] == value[:-3]]
        signature["value"] = data.draw(st.sampled_from(tail))
    elif how == "extra":
        signature["note"] = "signed by the auditor"
    else:
        signature["key_id"] = data.draw(
            st.text(alphabet="0123456789abcdef", min_size=16, max_size=16).filter(
                lambda k: k != signature["key_id"]
            )
        )
    _rechain(target, events, {**seal.payload, "signature": signature})
    with Journal(target) as j:
        assert j.verify("r").ok  # the chain alone cannot tell
        report = j.verify("r", public_key=KEY.public_key)
    assert report.signature == "invalid", report


def test_the_untouched_documents_still_verify(tmp_path: Path) -> None:
    """The strict reading refuses nothing the signer writes."""
    assert document_status(SIGNED, KEY.public_key) == "signed"
    assert document_status(SIGNED, PublicKey(Signer.generate().public_key.key)) == "invalid"
    events = _sealed_run(str(tmp_path / "j.sqlite"))
    assert events[-1].type == SEAL_TYPE
    with Journal(str(tmp_path / "j.sqlite")) as j:
        assert j.verify("r", public_key=KEY.public_key).signature == "signed"


def _lose_the_last_seal(target: str, run_id: str) -> None:
    """What a crash between a run's last commit and its seal leaves: no seal at the end."""
    (n,) = raw(target, "SELECT n_events FROM runs WHERE run_id = ?", (run_id,))[0]
    ((kind,),) = raw(
        target, "SELECT type FROM events WHERE run_id = ? AND seq = ?", (run_id, n - 1)
    )
    assert kind == SEAL_TYPE
    ((head,),) = raw(
        target, "SELECT hash FROM events WHERE run_id = ? AND seq = ?", (run_id, n - 2)
    )
    raw(target, "DELETE FROM events WHERE run_id = ? AND seq = ?", (run_id, n - 1))
    raw(
        target,
        "UPDATE runs SET n_events = ?, head_hash = ? WHERE run_id = ?",
        (n - 1, head, run_id),
    )


def test_runs_resume_makes_the_seal_a_crash_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A finished run whose seal was never written (the process died between the two
    commits) is sealed by ``runs resume`` with the key set; without it, it stays unsigned;
    a run whose tail after its end is not one a seal follows is never signed after the fact."""
    from dissensus.cli import main
    from dissensus.signing import SIGNING_KEY_ENV
    from pipeline_cases import panel, write_jsonl, write_policy

    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "1", "1"], swap=["1", "1", "1"])])
    pol = write_policy(tmp_path / "policy.yaml")
    pub = tmp_path / "pub.pem"
    pub.write_text(KEY.public_key.pem(), encoding="utf-8")
    target = str(tmp_path / "j.sqlite")
    monkeypatch.setenv(SIGNING_KEY_ENV, KEY.private_pem())
    args = ["decide", str(inp), "--policy", str(pol), "--journal", target, "--run-id", "S"]
    assert main([*args, "--json"]) == 0
    _lose_the_last_seal(target, "S")
    verify = ["runs", "verify", "S", "--journal", target, "--public-key", str(pub)]
    resume = ["runs", "resume", "S", "--journal", target, "--json"]

    monkeypatch.delenv(SIGNING_KEY_ENV)
    assert main(resume) == 0
    capsys.readouterr()
    assert main(verify) == 1
    assert "signature: unsigned (the run has no seal)" in capsys.readouterr().err

    monkeypatch.setenv(SIGNING_KEY_ENV, KEY.private_pem())
    assert main(resume) == 0
    capsys.readouterr()
    assert main(verify) == 0
    assert "signature: signed" in capsys.readouterr().out
    assert main(resume) == 0  # sealed once: a second resume adds nothing
    with Journal(target) as j:
        assert [e.type for e in j.events("S")][-2:] == ["run.finished", SEAL_TYPE]
        j.append("S", "note", {}, key="late")  # not an end a seal follows
    assert main(resume) == 0
    capsys.readouterr()
    assert main(verify) == 1
    assert "1 event(s) after the last seal" in capsys.readouterr().err


@pytest.mark.parametrize("as_json", [True, False])
def test_deliberate_refuses_an_unusable_key_before_any_model_call(
    as_json: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A signing key that cannot be used stops ``deliberate`` with exit 2, naming the
    variable and not the key, before the deliberation runs (its calls are not spent)."""
    import dissensus.cli.dci as dci_cli
    from dissensus.cli import main
    from dissensus.signing import SIGNING_KEY_ENV

    ran: list[str] = []

    async def never(*args: Any, **kwargs: Any) -> Any:
        ran.append("deliberated")
        raise AssertionError("the deliberation ran with an unusable key")

    monkeypatch.setattr(dci_cli, "_deliberate", never)
    broken = KEY.private_pem().replace("MC4C", "MC4D")
    monkeypatch.setenv(SIGNING_KEY_ENV, broken)
    task = str(Path(__file__).resolve().parent.parent / "examples" / "dci" / "routine.yaml")
    code = main(["deliberate", task, *(["--json"] if as_json else [])])
    out, err = capsys.readouterr()
    assert code == 2 and ran == []
    assert SIGNING_KEY_ENV in err and not out
    assert broken.splitlines()[1][8:] not in err


@pytest.mark.parametrize("order", ["public first", "private first", "private only"])
def test_a_public_key_file_holding_the_private_key_is_refused(
    order: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--public-key`` given a file that holds the private key, even after the public
    one (which a PEM reader would take): exit 2, the key never used nor shown."""
    from dissensus.cli import main

    target = str(tmp_path / "j.sqlite")
    _sealed_run(target)
    public, private = KEY.public_key.pem(), KEY.private_pem()
    text = {
        "public first": public + private,
        "private first": private + public,
        "private only": private,
    }[order]
    bundle = tmp_path / "key.pem"
    bundle.write_text(text, encoding="utf-8")
    code = main(["runs", "verify", "r", "--journal", target, "--public-key", str(bundle)])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert "a public key is needed" in err and "signature:" not in out + err
    assert private.splitlines()[1] not in out + err


@seed(20261205)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_single_character_change_of_a_sealed_run_fails_verify(
    tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    """One character of one stored column of one event of a sealed run replaced in
    place: ``runs verify`` fails, and with the key never answers ``signed``."""
    target = str(tmp_path_factory.mktemp("run") / "j.sqlite")
    events = _sealed_run(target)
    seq = data.draw(st.integers(0, len(events) - 1))
    column = data.draw(st.sampled_from(["key", "type", "at", "payload", "prev_hash", "hash"]))
    ((text,),) = raw(target, f"SELECT {column} FROM events WHERE run_id = 'r' AND seq = ?", (seq,))
    i = data.draw(st.integers(0, len(text) - 1))
    c = data.draw(st.sampled_from(sorted(set(B64 + '"{}[],: .') - {text[i]})))
    raw(
        target,
        f"UPDATE events SET {column} = ? WHERE run_id = 'r' AND seq = ?",
        (text[:i] + c + text[i + 1 :], seq),
    )
    with Journal(target) as j:
        report = j.verify("r", public_key=KEY.public_key)
    assert not report.ok, (seq, column, i, c)
    assert report.signature != "signed", (seq, column, i, c, report)


def test_a_run_stopped_by_its_deadline_is_sealed_and_sealed_again_when_finished(
    tmp_path: Path,
) -> None:
    """A deadline's stop ends an invocation of the run: the partial run is sealed (not
    left ``unsigned``), and the resume that finishes it seals its end."""
    import asyncio
    from collections.abc import AsyncGenerator

    from dissensus.pipeline.batch import DeadlineReached, execute_run, start_run
    from dissensus.pipeline.executors import Outcome, RunContext

    class Stalled:
        async def outcomes(self, ctx: RunContext) -> AsyncGenerator[Outcome, None]:
            await asyncio.sleep(30)
            return
            yield  # an async generator that hands nothing over before the deadline

    def run(journal: Journal, **kw: Any) -> list[Any]:
        async def go() -> list[Any]:
            return [r async for r in execute_run(journal, "r", **kw)]

        return asyncio.run(go())

    panels = Path(__file__).resolve().parent.parent / "examples" / "llmbar-swap.jsonl"
    text = "".join(panels.read_text(encoding="utf-8").splitlines(keepends=True)[:2])
    with Journal(tmp_path / "j.sqlite", signer=KEY) as journal:
        start_run(journal, None, {"reading": {"similarity": "tfidf"}}, text=text, run_id="r")
        with pytest.raises(DeadlineReached):
            run(journal, deadline_s=0.2, executor=Stalled())
        types = [e.type for e in journal.events("r")]
        assert types[-2:] == ["run.stopped", SEAL_TYPE], types
        assert journal.verify("r", public_key=KEY.public_key).signature == "signed"
        assert len(run(journal)) == 2
        types = [e.type for e in journal.events("r")]
        assert types[-2:] == ["run.finished", SEAL_TYPE], types
        report = journal.verify("r", public_key=KEY.public_key)
        assert report.ok and report.signature == "signed", report
