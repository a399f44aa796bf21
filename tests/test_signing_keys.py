"""Which key: a signature by another key is named (both key ids, the given key's file,
never a key's text), and a key rotated while a run lived verifies with both keys given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from dissensus.cli import main
from dissensus.signing import (
    KeyRing,
    Signer,
    document_detail,
    document_status,
    load_public_keys,
    sign_document,
)
from dissensus.store import Journal

JsonDoc = dict[str, Any]

OLD = Signer.generate()
NEW = Signer.generate()
STRANGER = Signer.generate()


def _pub(tmp_path: Path, name: str, signer: Signer) -> Path:
    path = tmp_path / f"{name}.pub.pem"
    path.write_text(signer.public_key.pem(), encoding="utf-8")
    return path


def _rotated_run(target: str) -> None:
    """Run ``r``: finished and sealed by ``OLD``, then a resolution sealed by ``NEW``."""
    with Journal(target, signer=OLD) as j:
        j.create_run("r", kind="t", meta={})
        j.append("r", "e", {"v": 1}, key="k1")
        j.append("r", "run.finished", {}, key="run/finished")
    with Journal(target, signer=NEW) as j:
        j.append("r", "case.resolved", {"decision": "1"}, key="case/1/resolved")


def test_a_run_sealed_by_a_rotated_key_verifies_with_both_keys(journal_target: str) -> None:
    _rotated_run(journal_target)
    with Journal(journal_target) as j:
        both = j.verify("r", public_key=KeyRing([OLD.public_key, NEW.public_key]))
        assert both.ok and both.signature == "signed", both.signature_detail
        old_only = j.verify("r", public_key=OLD.public_key)
        new_only = j.verify("r", public_key=NEW.public_key)
        stranger = j.verify("r", public_key=KeyRing([STRANGER.public_key, NEW.public_key]))
    assert old_only.signature == "invalid"
    assert f"signed by key {NEW.public_key.key_id}" in str(old_only.signature_detail)
    assert OLD.public_key.key_id in str(old_only.signature_detail)
    assert new_only.signature == "invalid"
    assert f"signed by key {OLD.public_key.key_id}" in str(new_only.signature_detail)
    assert stranger.signature == "invalid"  # a ring is no wildcard: each seal needs its key


def test_runs_verify_names_the_keys_and_takes_several(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = str(tmp_path / "j.sqlite")
    _rotated_run(target)
    old, new = _pub(tmp_path, "old", OLD), _pub(tmp_path, "new", NEW)
    capsys.readouterr()
    assert main(["runs", "verify", "r", "--journal", target, "--public-key", str(old)]) == 1
    err = capsys.readouterr().err
    assert f"signed by key {NEW.public_key.key_id}" in err
    assert f"key {OLD.public_key.key_id} from {old}" in err
    assert OLD.private_pem() not in err and NEW.private_pem() not in err
    args = ["runs", "verify", "r", "--journal", target, "--public-key", str(old)]
    assert main([*args, "--public-key", str(new)]) == 0
    assert "signature: signed" in capsys.readouterr().out


def test_verify_of_a_document_says_which_key_signed_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    packet = {
        "schema_version": "1",
        "task_id": "t",
        "question": "Which?",
        "status": "complete",
        "path": "converged",
        "residual_objections": [],
        "minority_report": [],
    }
    path = tmp_path / "packet.json"
    path.write_text(json.dumps(sign_document(packet, OLD)), encoding="utf-8")
    new, old = _pub(tmp_path, "new", NEW), _pub(tmp_path, "old", OLD)
    capsys.readouterr()
    assert main(["verify", str(path), "--public-key", str(new)]) == 1
    out = capsys.readouterr().out
    assert f"signed by key {OLD.public_key.key_id}" in out
    assert f"key {NEW.public_key.key_id} from {new}" in out
    assert main(["verify", str(path), "--public-key", str(new), "--public-key", str(old)]) == 0
    assert "signature signed" in capsys.readouterr().out
    assert main(["verify", str(path), "--public-key", str(new), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["signature"] == "invalid" and OLD.public_key.key_id in doc["signature_detail"]


@seed(20261205)
@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=8), max_size=4),
    st.sampled_from(["old", "new", "stranger"]),
    st.text(max_size=20),
    st.sampled_from(["other given", "not given", "junk"]),
)
def test_a_document_checks_only_with_the_key_it_names(
    doc: dict[str, object], by: str, edit: str, key_id_edit: str
) -> None:
    signers = {"old": OLD, "new": NEW, "stranger": STRANGER}
    ring = KeyRing([OLD.public_key, NEW.public_key])
    signed = sign_document(doc, signers[by])
    want = "invalid" if by == "stranger" else "signed"
    assert document_status(signed, ring) == want
    assert (document_detail(signed, ring) is None) == (want == "signed")
    changed = {**signed, "\x00edit": edit}  # any added field is a change the key did not sign
    assert document_status(changed, ring) == "invalid"
    assert "does not verify" in str(document_detail(changed, ring)) or by == "stranger"
    # The key_id edited: the ring checks with the key it names, never with another key
    # that would verify (so a key_id naming no given key is invalid, whoever signed).
    other = NEW if by == "old" else OLD
    key_id = {
        "other given": other.public_key.key_id,
        "not given": "0" * 16 if STRANGER.public_key.key_id != "0" * 16 else "1" * 16,
        "junk": "junk:" + edit,
    }[key_id_edit]
    renamed = {**signed, "signature": {**signed["signature"], "key_id": key_id}}
    for checking in (ring, OLD.public_key, NEW.public_key):
        assert document_status(renamed, checking) == "invalid", (key_id_edit, by)
        assert document_detail(renamed, checking) is not None


def test_a_key_id_that_is_no_key_id_is_not_repeated() -> None:
    signed = sign_document({"a": 1}, OLD)
    forged = {**signed, "signature": {**signed["signature"], "key_id": "\x1b[31m[bold]x"}}
    detail = str(document_detail(forged, NEW.public_key))
    assert "\x1b" not in detail and "[bold]" not in detail
    assert "a key_id that is no key's id" in detail


@pytest.mark.parametrize("alg", ["Ed25519", "ED25519", "rsa", "", None, 1])
def test_a_wrong_alg_is_named_as_such(alg: object) -> None:
    """A signature with exactly alg, key_id and value but another alg: said to hold
    another alg (it was said to hold 'other fields than alg, key_id and value')."""
    signed = sign_document({"a": 1}, OLD)
    wrong = {**signed, "signature": {**signed["signature"], "alg": alg}}
    assert document_status(wrong, OLD.public_key) == "invalid"
    detail = str(document_detail(wrong, OLD.public_key))
    assert "alg is not ed25519" in detail and "other fields" not in detail
    extra = {**signed, "signature": {**signed["signature"], "note": "x"}}
    assert "other fields than alg" in str(document_detail(extra, OLD.public_key))


def test_an_empty_public_key_among_several_is_refused(tmp_path: Path) -> None:
    from dissensus.errors import InputError

    with pytest.raises(InputError, match="empty path"):
        load_public_keys([str(_pub(tmp_path, "old", OLD)), ""])


def test_a_signing_key_variable_holding_a_path_a_public_or_an_encrypted_key_says_so(
    tmp_path: Path,
) -> None:
    """The common mistakes are named (never repeating the variable's text); before, each
    was only 'not an unencrypted PEM private key'."""
    from cryptography.hazmat.primitives import serialization

    from dissensus.errors import ConfigError
    from dissensus.signing import SIGNING_KEY_ENV, signer_from_env

    key_file = tmp_path / "signing-key.pem"
    key_file.write_text(OLD.private_pem(), encoding="utf-8")
    encrypted = (
        serialization.load_pem_private_key(OLD.private_pem().encode(), password=None)
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pass"),
        )
        .decode()
    )
    cases = {
        str(key_file): "it holds a file's path; it takes the PEM text itself",
        OLD.public_key.pem(): "it holds a public key",
        encrypted: "it is encrypted",
    }
    for value, words in cases.items():
        with pytest.raises(ConfigError) as caught:
            signer_from_env({SIGNING_KEY_ENV: value})
        message = str(caught.value)
        assert words in message and SIGNING_KEY_ENV in message
        assert str(key_file) not in message and value.strip()[30:60] not in message
    with pytest.raises(ConfigError) as caught:
        signer_from_env({SIGNING_KEY_ENV: "no key at all"})
    assert str(caught.value) == f"{SIGNING_KEY_ENV} is not an unencrypted PEM private key"
    # A path under an unknown user's home: Path.expanduser raises RuntimeError, which
    # crashed the command (exit 1, a traceback) instead of this error (exit 2).
    for value in ("~nosuchuser-dissensus/signing-key.pem", "~nosuchuser-dissensus"):
        with pytest.raises(ConfigError) as caught:
            signer_from_env({SIGNING_KEY_ENV: value})
        assert str(caught.value) == f"{SIGNING_KEY_ENV} is not an unencrypted PEM private key"


@pytest.mark.parametrize("payload", [[], "sealed", 7, None])
def test_a_seal_event_that_holds_no_object_is_invalid_not_overlooked(
    journal_target: str, payload: object
) -> None:
    """A writer without the key appends an event typed ``run.sealed`` whose payload is no
    object, chained and counted in the header: a seal holding anything but its claim
    and signature is ``invalid`` (docs/signing.md); it was skipped as no seal at all,
    the run read ``unsigned`` and the chain OK."""
    from dissensus.store import canonical, chain_hash
    from store_backends import raw

    with Journal(journal_target, signer=OLD) as j:
        j.create_run("r", kind="t", meta={})
        j.append("r", "e", {"v": 1}, key="k1")
        j.append("r", "run.finished", {}, key="run/finished")
        last = list(j.events("r"))[-1]
    seq = last.seq + 1
    body = {
        "run": "r",
        "seq": seq,
        "key": f"seal/{seq}",
        "type": "run.sealed",
        "case": None,
        "at": last.at,
        "payload": payload,
    }
    digest = chain_hash(last.hash, body)
    raw(
        journal_target,
        "INSERT INTO events (run_id, seq, key, type, case_ref, at, payload, prev_hash, hash) "
        "VALUES ('r', ?, ?, 'run.sealed', NULL, ?, ?, ?, ?)",
        (seq, f"seal/{seq}", last.at, canonical(payload), last.hash, digest),
    )
    raw(
        journal_target,
        "UPDATE runs SET n_events = ?, head_hash = ? WHERE run_id = 'r'",
        (seq + 1, digest),
    )
    with Journal(journal_target) as j:
        report = j.verify("r", public_key=OLD.public_key)
    assert not report.ok
    assert any("a seal holds only" in p for p in report.problems), report.problems
    assert report.signature == "invalid", report.signature_detail


def test_a_compared_certificate_says_its_comparison_is_not_signed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``negotiate --compare --json``'s output verified with a key: the certificate is
    signed, the comparison beside it is not, and verify says so (it said only 'signature:
    signed', and an edited comparison read as signed)."""
    from dissensus.signing import SIGNING_KEY_ENV

    problem = str(Path(__file__).resolve().parent.parent / "examples/concord/incident.yaml")
    monkeypatch.setenv(SIGNING_KEY_ENV, OLD.private_pem())
    capsys.readouterr()
    assert main(["negotiate", problem, "--compare", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    monkeypatch.delenv(SIGNING_KEY_ENV)
    doc["comparison"] = [{"strategy": "forged", "selected": "C1"}]
    path = tmp_path / "compared.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    pub = _pub(tmp_path, "old", OLD)
    assert main(["verify", str(path), "--public-key", str(pub)]) == 0
    out = capsys.readouterr().out
    assert "signature: signed (the certificate); not covered by the signature: comparison" in out
    assert main(["verify", str(path), "--public-key", str(pub), "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["signature"] == "signed" and verdict["unsigned_fields"] == ["comparison"]


B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


@seed(20261206)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_any_single_character_change_of_a_run_sealed_by_two_keys_fails_with_both(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """With both keys of a rotation given, one character of one stored column of one
    event replaced in place is never ``signed``: the ring checks each seal with its own
    key, it does not loosen the check."""
    from store_backends import raw

    target = str(tmp_path_factory.mktemp("run") / "j.sqlite")
    _rotated_run(target)
    ((n,),) = raw(target, "SELECT COUNT(*) FROM events WHERE run_id = 'r'")
    seq = data.draw(st.integers(0, n - 1))
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
        report = j.verify("r", public_key=KeyRing([OLD.public_key, NEW.public_key]))
    assert not report.ok, (seq, column, i, c)
    assert report.signature != "signed", (seq, column, i, c, report)


def test_what_a_signature_covers_is_values_not_spellings_as_docs_signing_say() -> None:
    """docs/signing.md: respellings of the same values verify; another value (85 for
    85.0, -0.0 for 0.0, NFD for NFC) is invalid."""
    doc = {"raw": 85.0, "zero": 0.0, "agent": "caf\u00e9", "n": 3}
    text = json.dumps(sign_document(doc, OLD), indent=2, ensure_ascii=False)
    same = [
        text.replace('"raw": 85.0', '"raw": 8.5e1'),
        text.replace('"raw": 85.0', '"raw": 85.000000000000000001'),
        text.replace("caf\u00e9", "caf\\u00e9"),
        json.dumps(json.loads(text)),
    ]
    other = [
        text.replace('"raw": 85.0', '"raw": 85'),
        text.replace('"zero": 0.0', '"zero": -0.0'),
        text.replace("caf\u00e9", "cafe\u0301"),
        text.replace('"n": 3', '"n": 3.0'),
    ]
    for i, variant in enumerate(same + other):
        assert variant != text
        status = document_status(json.loads(variant), OLD.public_key)
        assert status == ("signed" if i < len(same) else "invalid"), (i, variant)


def test_a_signed_certificate_verifies_through_every_door(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A certificate negotiate wrote with a key verified by the library, the service's
    POST /v1/verify and the MCP tool: valid, as the command line says (each answered
    'invalid: schema: signature: Extra inputs are not permitted')."""
    import asyncio

    pytest.importorskip("mcp")
    from dissensus import calls
    from dissensus import verify as library_verify
    from dissensus.signing import SIGNING_KEY_ENV
    from mcp_helpers import tool_data
    from serve_helpers import auth, client_for, settings

    problem = str(Path(__file__).resolve().parent.parent / "examples/concord/incident.yaml")
    monkeypatch.setenv(SIGNING_KEY_ENV, OLD.private_pem())
    out = tmp_path / "cert.json"
    assert main(["negotiate", problem, "--out", str(out)]) == 0
    monkeypatch.delenv(SIGNING_KEY_ENV)
    cert = json.loads(out.read_text(encoding="utf-8"))
    assert "signature" in cert
    assert main(["verify", str(out)]) == 0
    capsys.readouterr()
    assert library_verify(cert).valid
    assert calls.verify(cert).valid
    assert calls.verify({"certificate": cert, "comparison": None}).valid

    async def http() -> Any:
        async with client_for(settings(tmp_path)) as client:
            res = await client.post("/v1/verify", json=cert, headers=auth("sub"))
            return res.status_code, res.json()

    status, body = asyncio.run(asyncio.wait_for(http(), timeout=120))
    assert status == 200 and body["valid"] is True, body

    from mcp.client import Client

    from dissensus.integrations.mcp import build_server

    built = build_server(journal=str(tmp_path / "mcp.sqlite"), root=tmp_path)

    async def mcp() -> Any:
        async with Client(built) as client:
            return await client.call_tool("verify_certificate", {"certificate": cert})

    assert tool_data(asyncio.run(asyncio.wait_for(mcp(), timeout=120)))["valid"] is True
    # An edit is still found through the doors, the signature set aside or not.
    assert not library_verify({**cert, "floor": 0.99}).valid


def _flip(value: str, i: int) -> str:
    """``value`` with its character ``i`` replaced by another base64 character."""
    return value[:i] + ("B" if value[i] != "B" else "C") + value[i + 1 :]


def test_a_certificate_signature_is_never_read_as_checked_at_any_door(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every door that verifies a certificate without a key (the library, calls.verify,
    POST /v1/verify, the MCP tool, the command line without --public-key) refuses a
    signature not written as one (a schema violation) and says of one that is that it
    was not checked. Each answered ``valid: true`` for a garbage signature, a signature
    object with another field and an edited signature, and said nothing of a signature
    present but unchecked; ``--public-key`` finds each of them invalid."""
    import asyncio

    pytest.importorskip("mcp")
    from dissensus import calls
    from dissensus import verify as library_verify
    from dissensus.concord.record import canonical_digest
    from dissensus.signing import SIGNING_KEY_ENV
    from mcp_helpers import tool_data
    from serve_helpers import auth, client_for, settings

    problem = str(Path(__file__).resolve().parent.parent / "examples/concord/incident.yaml")
    monkeypatch.setenv(SIGNING_KEY_ENV, OLD.private_pem())
    out = tmp_path / "cert.json"
    assert main(["negotiate", problem, "--out", str(out)]) == 0
    monkeypatch.delenv(SIGNING_KEY_ENV)
    cert = json.loads(out.read_text(encoding="utf-8"))
    sig = cert["signature"]
    unsigned = {k: v for k, v in cert.items() if k != "signature"}
    edited = json.loads(json.dumps(unsigned))
    edited["candidates"][0]["text"] += " Also page the CEO."
    edited["digest"] = canonical_digest({k: v for k, v in edited.items() if k != "digest"})
    not_checked = "not checked (no public key given)"
    # name: (document, valid without a key, its signature state without a key)
    cases: dict[str, tuple[JsonDoc, bool, str]] = {
        "signed": (cert, True, not_checked),
        "unsigned": (unsigned, True, "unsigned"),
        "garbage": ({**unsigned, "signature": "garbage"}, False, "invalid"),
        "null": ({**unsigned, "signature": None}, False, "invalid"),
        "extra field": ({**cert, "signature": {**sig, "note": "x"}}, False, "invalid"),
        "alg": ({**cert, "signature": {**sig, "alg": "Ed25519"}}, False, "invalid"),
        "key_id": (
            {**cert, "signature": {**sig, "key_id": sig["key_id"].upper()}},
            False,
            "invalid",
        ),
        "value spelling": (
            {**cert, "signature": {**sig, "value": _flip(sig["value"], len(sig["value"]) - 3)}},
            False,
            "invalid",
        ),
        "value edited": (
            {**cert, "signature": {**sig, "value": _flip(sig["value"], 5)}},
            True,
            not_checked,
        ),
        "candidate edited": ({**edited, "signature": sig}, True, not_checked),
    }
    assert edited["digest"] != cert["digest"]

    def check(door: str, name: str, verdict: dict[str, Any]) -> None:
        _, valid, state = cases[name]
        assert verdict["valid"] is valid, (door, name, verdict)
        assert verdict["signature"] == state, (door, name, verdict)
        if not valid:
            assert verdict["violated"] == "schema", (door, name, verdict)
            assert verdict["message"].startswith("signature: "), (door, name, verdict)
        if name == "unsigned":  # unchanged apart from the new field
            assert set(verdict) == {"valid", "violated", "message", "checked", "signature"}

    for name, (doc, _, _) in cases.items():
        check("library", name, library_verify(doc).model_dump(mode="json"))
        check("calls", name, calls.verify(doc).model_dump(mode="json"))
        check("compared", name, calls.verify({"certificate": doc, "comparison": None}).model_dump())

    async def http() -> dict[str, Any]:
        answers = {}
        async with client_for(settings(tmp_path)) as client:
            for name, (doc, _, _) in cases.items():
                res = await client.post("/v1/verify", json=doc, headers=auth("sub"))
                assert res.status_code == 200, (name, res.text)
                answers[name] = res.json()
            schema = (await client.get("/openapi.json")).json()["components"]["schemas"]
        assert schema["Verdict"]["properties"]["signature"]["enum"] == [
            "unsigned",
            not_checked,
            "signed",
            "invalid",
        ]
        return answers

    for name, verdict in asyncio.run(asyncio.wait_for(http(), timeout=120)).items():
        check("http", name, verdict)

    from mcp.client import Client

    from dissensus.integrations.mcp import build_server

    built = build_server(journal=str(tmp_path / "mcp.sqlite"), root=tmp_path)

    async def mcp() -> dict[str, Any]:
        async with Client(built) as client:
            return {
                name: tool_data(await client.call_tool("verify_certificate", {"certificate": doc}))
                for name, (doc, _, _) in cases.items()
            }

    for name, verdict in asyncio.run(asyncio.wait_for(mcp(), timeout=120)).items():
        check("mcp", name, verdict)

    pub = _pub(tmp_path, "old", OLD)
    for name, (doc, valid, state) in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        capsys.readouterr()
        assert main(["verify", str(path), "--json"]) == (0 if valid else 1), name
        check("cli --json", name, json.loads(capsys.readouterr().out))
        assert main(["verify", str(path)]) == (0 if valid else 1), name
        human = capsys.readouterr().out
        if state == "unsigned":
            assert "signature" not in human, (name, human)
        else:
            assert f"signature: {state}" in human, (name, human)
        if not valid:
            assert "invalid: schema: signature: " in human, (name, human)
        want = "signed" if name == "signed" else "unsigned" if name == "unsigned" else "invalid"
        assert main(["verify", str(path), "--public-key", str(pub), "--json"]) == (
            0 if want == "signed" else 1
        ), name
        assert json.loads(capsys.readouterr().out)["signature"] == want, name


def _rewrite_chain(
    target: str, edit: dict[str, object], forge: str | None, key_id: str | None
) -> None:
    """What a writer with the database but no key can do: edit the payload of the run's
    events of type ``e``, recompute every hash and each seal's claim (``n_events``,
    ``head``), keep the seals' old signatures (``forge`` None) or put in a signature
    written as one under ``key_id`` (``stranger``: the stranger's signature of the new
    claim; ``random``: 64 random bytes), and update the run's header."""
    import base64
    import random

    from dissensus.store import canonical, chain_hash
    from store_backends import raw

    rows = raw(
        target,
        "SELECT seq, key, type, case_ref, at, payload, prev_hash FROM events "
        "WHERE run_id = 'r' ORDER BY seq",
    )
    prev = rows[0][6]
    for seq, key, typ, case, at, text, _ in rows:
        payload = json.loads(text)
        if typ == "e":
            payload = edit
        if typ == "run.sealed":
            payload["head"], payload["n_events"] = prev, seq
            claim = {k: payload[k] for k in ("run", "n_events", "head")}
            if forge == "stranger":
                payload["signature"] = {**STRANGER.sign_text(canonical(claim)), "key_id": key_id}
            elif forge == "random":
                value = bytes(random.Random(seq).getrandbits(8) for _ in range(64))
                payload["signature"] = {
                    "alg": "ed25519",
                    "key_id": key_id,
                    "value": base64.b64encode(value).decode("ascii"),
                }
        body = {"run": "r", "seq": seq, "key": key, "type": typ, "case": case, "at": at}
        digest = chain_hash(prev, {**body, "payload": payload})
        raw(
            target,
            "UPDATE events SET payload = ?, prev_hash = ?, hash = ? WHERE run_id = 'r' AND seq = ?",
            (canonical(payload), prev, digest, seq),
        )
        prev = digest
    raw(target, "UPDATE runs SET head_hash = ? WHERE run_id = 'r'", (prev,))


@seed(20261207)
@settings(max_examples=30, deadline=None)
@given(
    st.dictionaries(st.text(max_size=4), st.integers() | st.text(max_size=6), max_size=3).filter(
        lambda d: d != {"v": 1}
    ),
    st.sampled_from(["one key", "ring of one", "ring of two"]),
    st.sampled_from([None, "stranger", "random"]),
    st.sampled_from(["old", "new"]),
)
def test_a_chain_rewritten_whole_reads_ok_but_never_signed(
    tmp_path_factory: pytest.TempPathFactory,
    edit: dict[str, object],
    keys: str,
    forge: str | None,
    under: str,
) -> None:
    """A run rewritten consistently (an event's payload edited, every hash and each
    seal's claim recomputed) passes the hash chain, which only the signatures can catch:
    the seals' old signatures kept, or a signature written as one under a given key's id
    put in, never read ``signed``, with one key or with a ring (a ring that only looked
    for the key_id among its keys read such a run ``signed``)."""
    target = str(tmp_path_factory.mktemp("run") / "j.sqlite")
    if keys == "ring of two":
        _rotated_run(target)
        checking: Any = KeyRing([OLD.public_key, NEW.public_key])
    else:
        with Journal(target, signer=OLD) as j:
            j.create_run("r", kind="t", meta={})
            j.append("r", "e", {"v": 1}, key="k1")
            j.append("r", "run.finished", {}, key="run/finished")
        checking = OLD.public_key if keys == "one key" else KeyRing([OLD.public_key])
        under = "old"
    with Journal(target) as j:
        before = j.verify("r", public_key=checking)
    assert before.ok and before.signature == "signed", before.signature_detail
    key_id = (OLD if under == "old" else NEW).public_key.key_id
    _rewrite_chain(target, edit, forge, key_id)
    with Journal(target) as j:
        after = j.verify("r", public_key=checking)
        assert [e.payload for e in j.events("r") if e.type == "e"] == [edit]
    assert after.ok, after.problems  # the chain alone cannot tell
    assert after.signature == "invalid", (keys, forge, after.signature_detail)
