"""Signing: DISSENSUS_SIGNING_KEY seals run heads and signs certificates and decision
packets; --public-key checks them and tells "unsigned" from "invalid"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dissensus.cli import main
from dissensus.errors import ConfigError, InputError
from dissensus.pipeline import decide, policy_from_dict
from dissensus.pipeline.review import resolve
from dissensus.signing import (
    SIGNING_KEY_ENV,
    Signer,
    document_status,
    load_public_key,
    sign_document,
    signer_from_env,
)
from dissensus.store import SEAL_TYPE, Journal
from pipeline_cases import as_panel, panel, write_jsonl, write_policy
from store_backends import raw

REPO = Path(__file__).resolve().parent.parent
KEY = Signer.generate()
OTHER = Signer.generate()


@pytest.fixture
def keys(tmp_path: Path) -> tuple[str, Path, Path]:
    """(private PEM, public key file, another key's public file)."""
    pub = tmp_path / "pub.pem"
    pub.write_text(KEY.public_key.pem(), encoding="utf-8")
    other = tmp_path / "other.pem"
    other.write_text(OTHER.public_key.pem(), encoding="utf-8")
    return KEY.private_pem(), pub, other


def test_the_key_comes_from_the_environment_and_is_never_echoed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)
    assert signer_from_env() is None
    pem = KEY.private_pem()
    signer = signer_from_env({SIGNING_KEY_ENV: pem})
    assert signer is not None and signer.public_key.key_id == KEY.public_key.key_id
    assert pem not in repr(signer)
    broken = pem.replace("A", "B", 5)
    with pytest.raises(ConfigError) as caught:
        signer_from_env({SIGNING_KEY_ENV: broken[:60]})
    assert broken[30:60] not in str(caught.value)
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ec_pem = (
        ec.generate_private_key(ec.SECP256R1())
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode()
    )
    with pytest.raises(ConfigError, match="must be an Ed25519 private key"):
        signer_from_env({SIGNING_KEY_ENV: ec_pem})


def test_documents_are_signed_unsigned_or_invalid() -> None:
    doc = {"status": "certified", "scores": {"a": 0.5}, "digest": "sha256:x"}
    signed = sign_document(doc, KEY)
    assert document_status(signed, KEY.public_key) == "signed"
    assert document_status(doc, KEY.public_key) == "unsigned"
    assert document_status(signed, OTHER.public_key) == "invalid"
    assert document_status({**signed, "scores": {"a": 0.9}}, KEY.public_key) == "invalid"
    assert document_status({**signed, "signature": "junk"}, KEY.public_key) == "invalid"
    assert sign_document(signed, KEY) == signed  # re-signing replaces, never nests


def test_a_public_key_file_cannot_be_the_private_pem_and_bad_files_are_input_errors(
    tmp_path: Path,
) -> None:
    priv = tmp_path / "priv.pem"
    priv.write_text(KEY.private_pem(), encoding="utf-8")
    with pytest.raises(InputError, match="a private key; a public key is needed"):
        load_public_key(priv)
    (tmp_path / "junk.pem").write_text("hello", encoding="utf-8")
    with pytest.raises(Exception, match="not a PEM public key"):
        load_public_key(tmp_path / "junk.pem")


POLICY = policy_from_dict({"reading": {"similarity": "tfidf", "theta_s": 0.3}})


def test_a_finished_run_and_each_resolution_seal_the_head(journal_target: str) -> None:
    with Journal(journal_target, signer=KEY) as j:
        row = panel(
            "vc",
            ["1", "2", "1"],
            values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}],
            reasoning=["Option 1."] * 3,
        )
        record = decide(as_panel(row), POLICY, journal=j, run_id="R")  # a run of one case
        assert record.review_id
        assert [e.type for e in j.events("R")][-2:] == ["run.finished", SEAL_TYPE]
        assert j.verify("R", public_key=KEY.public_key).signature == "signed"
        resolve(j, record.review_id, decision="1", note="n", reviewer="kim")
        types = [e.type for e in j.events("R")]
        assert types[-3:] == ["review.resolved", "case.resolved", SEAL_TYPE]
        report = j.verify("R", public_key=KEY.public_key)
        assert report.ok and report.signature == "signed"
        assert j.verify("R", public_key=OTHER.public_key).signature == "invalid"
        assert j.verify("R").signature is None  # no key given: not checked
        j.append("R", "note", {}, key="late")  # only run.finished and case.resolved seal
        report = j.verify("R", public_key=KEY.public_key)
        assert report.signature == "unsigned" and "1 event(s) after the last seal" in str(
            report.signature_detail
        )


def _sealed_run(target: str) -> list[Any]:
    """Run ``r`` of three events and its end, sealed with ``KEY``: its events."""
    with Journal(target, signer=KEY) as j:
        j.create_run("r", kind="t", meta={})
        for i in range(3):
            j.append("r", "e", {"v": i}, key=f"k{i}")
        j.append("r", "run.finished", {}, key="run/finished")
        return list(j.events("r"))


def test_a_re_chained_journal_verifies_without_a_key_but_not_with_one(journal_target: str) -> None:
    """An editor who rewrites a payload and recomputes every hash and the header defeats
    the unkeyed chain; the sealed head exposes it."""
    from dissensus.store import GENESIS, canonical, chain_hash

    events = _sealed_run(journal_target)
    prev = GENESIS
    for e in events:
        payload = {"v": 99} if e.key == "k1" else e.payload
        if e.type == SEAL_TYPE:  # a careful editor fixes the seal's head too, but cannot re-sign it
            payload = {**payload, "head": prev}
        body = {**e.body(), "payload": payload}
        digest = chain_hash(prev, body)
        raw(
            journal_target,
            "UPDATE events SET payload = ?, prev_hash = ?, hash = ? WHERE run_id = 'r' AND seq = ?",
            (canonical(payload), prev, digest, e.seq),
        )
        prev = digest
    raw(journal_target, "UPDATE runs SET head_hash = ? WHERE run_id = 'r'", (prev,))
    with Journal(journal_target) as j:
        assert j.verify("r").ok  # the chain alone cannot tell
        report = j.verify("r", public_key=KEY.public_key)
    assert report.ok and report.signature == "invalid"


def test_runs_verify_public_key_cli(
    tmp_path: Path,
    keys: tuple[str, Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pem, pub, other = keys
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "1", "1"], swap=["1", "1", "1"])])
    pol = write_policy(tmp_path / "policy.yaml")
    signed_j, plain_j = str(tmp_path / "signed.sqlite"), str(tmp_path / "plain.sqlite")
    monkeypatch.setenv(SIGNING_KEY_ENV, pem)
    assert (
        main(
            [
                "decide",
                str(inp),
                "--policy",
                str(pol),
                "--journal",
                signed_j,
                "--run-id",
                "S",
                "--json",
            ]
        )
        == 0
    )
    monkeypatch.delenv(SIGNING_KEY_ENV)
    assert (
        main(
            [
                "decide",
                str(inp),
                "--policy",
                str(pol),
                "--journal",
                plain_j,
                "--run-id",
                "P",
                "--json",
            ]
        )
        == 0
    )
    capsys.readouterr()

    assert main(["runs", "verify", "S", "--journal", signed_j, "--public-key", str(pub)]) == 0
    assert "signature: signed" in capsys.readouterr().out
    assert main(["runs", "verify", "P", "--journal", plain_j, "--public-key", str(pub)]) == 1
    assert "signature: unsigned (the run has no seal)" in capsys.readouterr().err
    assert main(["runs", "verify", "S", "--journal", signed_j, "--public-key", str(other)]) == 1
    assert "signature: invalid" in capsys.readouterr().err
    assert main(["runs", "verify", "P", "--journal", plain_j]) == 0  # no key asked: the chain alone
    capsys.readouterr()
    assert (
        main(["runs", "verify", "S", "--journal", signed_j, "--public-key", str(pub), "--json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["signature"] == "signed"


def test_certificates_are_signed_and_verify_checks_them(
    tmp_path: Path,
    keys: tuple[str, Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pem, pub, other = keys
    problem = str(REPO / "examples" / "concord" / "incident.yaml")
    signed, plain = tmp_path / "signed.json", tmp_path / "plain.json"
    monkeypatch.setenv(SIGNING_KEY_ENV, pem)
    assert main(["negotiate", problem, "--out", str(signed)]) == 0
    monkeypatch.delenv(SIGNING_KEY_ENV)
    assert main(["negotiate", problem, "--out", str(plain)]) == 0
    assert "signature" in json.loads(signed.read_text()) and "signature" not in json.loads(
        plain.read_text()
    )
    capsys.readouterr()
    assert main(["verify", str(signed)]) == 0  # the signature does not disturb the recomputation
    assert main(["verify", str(signed), "--public-key", str(pub)]) == 0
    assert "signature: signed" in capsys.readouterr().out
    assert main(["verify", str(plain), "--public-key", str(pub)]) == 1
    assert "signature: unsigned" in capsys.readouterr().out
    assert main(["verify", str(signed), "--public-key", str(other)]) == 1
    assert "signature: invalid" in capsys.readouterr().out


def test_decision_packets_are_signed_and_verify_checks_them(
    tmp_path: Path,
    keys: tuple[str, Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pem, pub, other = keys
    task = str(REPO / "examples" / "dci" / "hidden_profile.yaml")
    monkeypatch.setenv(SIGNING_KEY_ENV, pem)
    main(["deliberate", task, "--json"])
    line = capsys.readouterr().out.strip()
    out = json.loads(line)
    assert out["packet"]["signature"]["alg"] == "ed25519"
    path = tmp_path / "out.json"
    path.write_text(line, encoding="utf-8")
    packet = tmp_path / "packet.json"
    packet.write_text(json.dumps(out["packet"]), encoding="utf-8")
    assert main(["verify", str(path), "--public-key", str(pub)]) == 0
    assert "decision packet: signature signed" in capsys.readouterr().out
    assert main(["verify", str(packet), "--public-key", str(other)]) == 1
    assert "signature invalid" in capsys.readouterr().out
    out["packet"].pop("signature")
    packet.write_text(json.dumps(out["packet"]), encoding="utf-8")
    assert main(["verify", str(packet), "--public-key", str(pub)]) == 1
    assert "signature unsigned" in capsys.readouterr().out
    # without a key a packet is no certificate: invalid: schema, exit 1 (docs/concord.md)
    assert main(["verify", str(packet)]) == 1


@pytest.mark.parametrize("edit", ["payload, seal kept", "seal extra field", "seal key"])
def test_a_seal_that_no_longer_describes_its_chain_is_invalid_not_signed(
    journal_target: str, edit: str
) -> None:
    """A re-chained journal whose seal was kept as it was (its signature still verifies,
    over a claim the chain no longer matches), or whose seal event was given another
    field or key and re-chained: ``invalid``, never ``signed`` beside a failed check."""
    from dissensus.store import GENESIS, canonical, chain_hash

    events = _sealed_run(journal_target)
    assert events[-1].type == SEAL_TYPE
    prev = GENESIS
    for e in events:
        payload, key = e.payload, e.key
        if edit == "payload, seal kept" and e.key == "k1":
            payload = {"v": 99}
        if edit == "seal extra field" and e.type == SEAL_TYPE:
            payload = {**payload, "note": "forged"}
        if edit == "seal key" and e.type == SEAL_TYPE:
            key = "seal/other"
        digest = chain_hash(prev, {**e.body(), "payload": payload, "key": key})
        raw(
            journal_target,
            "UPDATE events SET payload = ?, key = ?, prev_hash = ?, hash = ? "
            "WHERE run_id = 'r' AND seq = ?",
            (canonical(payload), key, prev, digest, e.seq),
        )
        prev = digest
    raw(journal_target, "UPDATE runs SET head_hash = ? WHERE run_id = 'r'", (prev,))
    with Journal(journal_target) as j:
        report = j.verify("r", public_key=KEY.public_key)
    assert not report.ok
    assert report.signature == "invalid", report
    assert "seal" in " ".join(report.problems)


@pytest.mark.parametrize("column", ["at", "payload", "key"])
@pytest.mark.parametrize("row", ["seal", "run.finished", "first"])
def test_an_edited_row_even_the_seal_s_own_is_invalid_not_signed(
    journal_target: str, row: str, column: str
) -> None:
    """One column of one row edited in place (not re-chained), the seal event itself
    included: the chain check fails at that row, and the signature is ``invalid``, never
    ``signed`` beside the failed check."""
    events = _sealed_run(journal_target)
    assert events[-1].type == SEAL_TYPE
    with Journal(journal_target) as j:
        assert j.verify("r", public_key=KEY.public_key).signature == "signed"
    target = {"seal": events[-1], "run.finished": events[-2], "first": events[0]}[row]
    value = {
        "at": "2000-01-01T00:00:00+00:00",
        "payload": json.dumps({**target.payload, "note": "forged"}),
        "key": f"{target.key}/other",
    }[column]
    raw(
        journal_target,
        f"UPDATE events SET {column} = ? WHERE run_id = 'r' AND seq = ?",
        (value, target.seq),
    )
    with Journal(journal_target) as j:
        report = j.verify("r", public_key=KEY.public_key)
    assert not report.ok, report
    assert report.signature == "invalid", report
    assert f"event {target.seq}" in report.signature_detail, report


@pytest.mark.parametrize("value", ["", "   ", "\n\t\n"])
def test_a_set_but_blank_signing_key_is_a_configuration_error(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``export DISSENSUS_SIGNING_KEY="$(cat missing.pem)"`` asked for signing: it is exit 2
    naming the variable, as a garbage key is, never a silent unsigned run."""
    from cli_helpers import cli

    with pytest.raises(ConfigError, match=SIGNING_KEY_ENV):
        signer_from_env({SIGNING_KEY_ENV: value})
    assert signer_from_env({}) is None  # unset: unsigned
    out = tmp_path / "cert.json"
    problem = str(REPO / "examples" / "concord" / "incident.yaml")
    for env_value in (value, "garbage-key-text"):
        res = cli("negotiate", problem, "--out", out, env={SIGNING_KEY_ENV: env_value})
        assert res.code == 2, res.err
        lines = res.err.strip().splitlines()
        assert len(lines) == 1 and SIGNING_KEY_ENV in lines[0], res.err
        assert "garbage-key-text" not in res.err
        assert not out.exists()


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE events SET payload = '{\"v\":7}' WHERE run_id = 'r' AND key = 'k1'",
        "UPDATE events SET at = 'x' WHERE run_id = 'r' AND key = 'k0'",
        "UPDATE events SET type = 'forged' WHERE run_id = 'r' AND key = 'k2'",
        "DELETE FROM events WHERE run_id = 'r' AND key = 'k1'",
    ],
    ids=["payload", "at", "type", "deleted"],
)
def test_an_event_edited_under_a_seal_is_invalid_not_signed(journal_target: str, edit: str) -> None:
    """An event edited in place (its stored hash kept, so the seal's claim still names
    the stored head and its signature verifies): the chain check fails and the signed
    content changed, so the signature is ``invalid``, never ``signed`` beside a failed
    check. An edit after the last seal leaves the signature ``unsigned``."""
    events = _sealed_run(journal_target)
    assert events[-1].type == SEAL_TYPE
    raw(journal_target, edit)
    with Journal(journal_target) as j:
        report = j.verify("r", public_key=KEY.public_key)
    assert not report.ok
    assert report.signature == "invalid", report
    assert "the signed content changed" in str(report.signature_detail)


def test_an_edit_after_the_last_seal_is_unsigned(journal_target: str) -> None:
    _sealed_run(journal_target)
    with Journal(journal_target) as j:
        j.append("r", "note", {"n": 1}, key="late")
    raw(
        journal_target,
        "UPDATE events SET payload = '{\"n\":2}' WHERE run_id = 'r' AND key = 'late'",
    )
    with Journal(journal_target) as j:
        report = j.verify("r", public_key=KEY.public_key)
    assert not report.ok and report.signature == "unsigned", report


@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_public_key_path_is_refused_not_skipped(
    tmp_path: Path, keys: tuple[str, Path, Path], value: str
) -> None:
    """``--public-key "$UNSET"`` must not verify without the key unseen (exit 0 for an
    unsigned or forged run): exit 2 naming the empty path, for runs and certificates."""
    from cli_helpers import cli

    with pytest.raises(InputError, match="empty path"):
        load_public_key(value)
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "1", "1"], swap=["1", "1", "1"])])
    journal = tmp_path / "plain.sqlite"
    decided = cli(
        "decide",
        inp,
        "--policy",
        write_policy(tmp_path / "p.yaml"),
        "--journal",
        journal,
        "--run-id",
        "P",
    )
    assert decided.code == 0, decided.err
    got = cli("runs", "verify", "P", "--journal", journal, "--public-key", value)
    assert got.code == 2 and "empty path" in got.err and "OK" not in got.out, (got.out, got.err)
    cert = tmp_path / "cert.json"
    assert (
        cli("negotiate", REPO / "examples" / "concord" / "incident.yaml", "--out", cert).code == 0
    )
    got = cli("verify", cert, "--public-key", value)
    assert got.code == 2 and "empty path" in got.err, (got.out, got.err)
