"""Ed25519 signatures over canonical JSON: run heads, certificates, decision packets.

The private key is read from ``$DISSENSUS_SIGNING_KEY`` only (an Ed25519 private key in
PEM, the text itself, never a path and never a command-line flag), so it is never in
shell history, a policy file or the journal. Unset means unsigned; set but empty or
blank (``"$(cat missing.pem)"``) is a configuration error (exit 2, naming the variable),
like a key that does not parse: never a silent fall-back to unsigned. Verifiers take the public key as a PEM
file (``--public-key FILE``): a regular file of at most :data:`MAX_KEY_BYTES` (a PEM
Ed25519 key is a few hundred bytes); a device, a named pipe or a larger file is one
error line naming it (exit 2), read no further. A file holding a private key's PEM is
refused the same way (``a public key is needed``), also when a public key's PEM comes
first in it (a PEM reader takes the first block and would use the file): it would
verify, but a verifier should never hold the private key.

A signature is a small JSON object::

    {"alg": "ed25519", "key_id": "<first 16 hex of sha256(raw public key)>", "value": "<base64>"}

over the UTF-8 bytes of a canonical JSON text (:func:`dissensus.canonical.canonical`).
A signed document (certificate, packet) carries it in a top-level ``signature`` field,
and the signed text is the canonical JSON of the document *without* that field.

Checking gives one of three answers, kept distinct on purpose: ``signed`` (a signature
that verifies with the given public key), ``unsigned`` (no signature at all), and
``invalid`` (a signature that does not verify: wrong key, or the document or signature
was changed).

Choices this module makes:

* **One spelling of a signature.** A signature checks only when its object is exactly
  what :meth:`Signer.sign_text` writes: ``alg``, ``key_id`` and ``value``, no other
  field; ``key_id`` the checking key's; ``value`` the canonical base64 of 64 bytes.
  Base64 decoders ignore the unused bits of the last character, so without that a
  changed character of ``value`` could still verify; and a field added to the signature
  or an edited ``key_id`` is a change of the signed document (or of a run's seal) that
  the signature itself does not cover, so it is ``invalid``, never ``signed``. The
  spelling needs no key (:func:`signature_problem`), so a door that checks no signature
  (a certificate verified without a key) still refuses one not written so.

* **The common mistakes named.** A ``$DISSENSUS_SIGNING_KEY`` that is no unencrypted
  PEM private key says what it holds instead when that is a path to an existing file
  (the variable takes the text), a public key, or an encrypted key; never any of its
  text.
* **Which key, by id.** A signature that does not check says why
  (:func:`why_invalid`): signed by another key (both named by ``key_id``, the given one
  by its file too), or under the given key's id but not verifying. A key's text is
  never shown, nor a ``key_id`` that is not 16 hex digits (it is the forger's text).
* **Several keys, each signature by its own.** A :class:`KeyRing` (``--public-key``
  given more than once, a rotated key) checks a signature with the key its ``key_id``
  names among those given: never with any key that happens to verify, and never with
  a key not given.

What a signature proves: the holder of the private key produced exactly this text (a
run's head covers every event before it through the hash chain). What it does not
prove: that the inputs were true, that the key was not stolen, when the text was signed
(timestamps are the signer's own claim), or anything about events appended after the
last seal.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import re
from pathlib import Path
from typing import Any, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from dissensus.canonical import canonical
from dissensus.errors import ConfigError, InputError
from dissensus.types import JsonObject

__all__ = [
    "MAX_KEY_BYTES",
    "SIGNATURE_BYTES",
    "SIGNATURE_KEYS",
    "SIGNING_KEY_ENV",
    "KeyRing",
    "PublicKey",
    "Signer",
    "document_detail",
    "document_status",
    "load_public_key",
    "load_public_keys",
    "sign_document",
    "signature_problem",
    "signed_kind",
    "signer_from_env",
    "verify_text",
    "why_invalid",
]

SIGNING_KEY_ENV = "DISSENSUS_SIGNING_KEY"
"""Environment variable holding the Ed25519 private key (PEM text)."""

SIGNATURE_FIELD = "signature"

Status = Literal["signed", "unsigned", "invalid"]


def _key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


class PublicKey:
    """An Ed25519 public key used to check signatures (``source``: the file it was read
    from, named in messages; never the key's text)."""

    def __init__(self, key: Ed25519PublicKey, *, source: str | None = None) -> None:
        self.key = key
        self.key_id = _key_id(key)
        self.source = source

    def find(self, key_id: object) -> PublicKey | None:
        """The trusted key whose id is ``key_id`` (``None``: no such key given)."""
        return self if key_id == self.key_id else None

    def named(self) -> str:
        """The key as messages name it: its id and the file it came from."""
        return f"key {self.key_id}" + (f" from {self.source}" if self.source else "")

    def pem(self) -> str:
        return self.key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode("ascii")


class KeyRing(PublicKey):
    """Several trusted public keys (``--public-key`` given more than once): a signature
    checks with the one its ``key_id`` names. A key rotated while a run lived leaves
    seals by the old key and by the new one; each is checked with its own key."""

    def __init__(self, keys: list[PublicKey]) -> None:
        if not keys:
            raise ValueError("a key ring needs at least one key")
        super().__init__(keys[0].key, source=keys[0].source)
        self.keys = {k.key_id: k for k in keys}

    def find(self, key_id: object) -> PublicKey | None:
        return self.keys.get(key_id) if isinstance(key_id, str) else None

    def named(self) -> str:
        return ", ".join(k.named() for k in self.keys.values())


class Signer:
    """Signs canonical JSON texts with an Ed25519 private key."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self.public_key = PublicKey(key.public_key())

    def __repr__(self) -> str:  # never show key material
        return f"Signer(key_id={self.public_key.key_id})"

    def sign_text(self, text: str) -> dict[str, str]:
        """The signature object of ``text``."""
        value = self._key.sign(text.encode("utf-8"))
        return {
            "alg": "ed25519",
            "key_id": self.public_key.key_id,
            "value": base64.b64encode(value).decode("ascii"),
        }

    @classmethod
    def from_pem(cls, pem: str | bytes, *, source: str = SIGNING_KEY_ENV) -> Signer:
        data = pem.encode("utf-8") if isinstance(pem, str) else pem
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            # The message never repeats the key text.
            raise ConfigError(
                f"{source} is not an unencrypted PEM private key{_why_not(data)}"
            ) from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigError(f"{source} must be an Ed25519 private key, got {type(key).__name__}")
        return cls(key)

    @classmethod
    def generate(cls) -> Signer:
        """A fresh random key (tests and key set-up)."""
        return cls(Ed25519PrivateKey.generate())

    def private_pem(self) -> str:
        return self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode("ascii")


def _why_not(data: bytes) -> str:
    """What a text that is no unencrypted PEM private key holds instead, when it is a
    common mistake (never any of its text: it may be a key)."""
    if b"ENCRYPTED PRIVATE KEY-----" in data or b"Proc-Type: 4,ENCRYPTED" in data:
        return ": it is encrypted (openssl pkey -in KEY.pem -out PLAIN.pem writes it unencrypted)"
    if b"PUBLIC KEY-----" in data and b"PRIVATE KEY-----" not in data:
        return ": it holds a public key; signing needs the private key's PEM"
    text = data.decode("utf-8", "replace").strip()
    if b"-----BEGIN" not in data and "\n" not in text and len(text) < 4096:
        # expanduser raises RuntimeError for ``~nosuchuser/...``: no file, not a crash.
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            if Path(text).expanduser().is_file():
                return (
                    ": it holds a file's path; it takes the PEM text itself "
                    '(export DISSENSUS_SIGNING_KEY="$(cat FILE)")'
                )
    return ""


def signer_from_env(environ: dict[str, str] | None = None) -> Signer | None:
    """The signer of ``$DISSENSUS_SIGNING_KEY``, or ``None`` when it is unset.

    Set but empty or blank (``export DISSENSUS_SIGNING_KEY="$(cat missing.pem)"``) is a
    :class:`~dissensus.errors.ConfigError` (exit 2), like a key that does not parse: the
    user asked for signing, and running unsigned would be silent."""
    env = os.environ if environ is None else environ
    raw = env.get(SIGNING_KEY_ENV)
    if raw is None:
        return None
    pem = raw.strip()
    if not pem:
        raise ConfigError(
            f"{SIGNING_KEY_ENV} is set but empty: give it the PEM text of an Ed25519 "
            "private key, or unset it to run unsigned"
        )
    return Signer.from_pem(pem)


MAX_KEY_BYTES = 1024 * 1024
"""Largest public key file read (``--public-key``)."""


def load_public_key(path: str | Path) -> PublicKey:
    """An Ed25519 public key from a PEM file; a private key's PEM is refused (a verifier
    needs only the public key, and a private key handed to one has leaked)."""
    from dissensus.files import read_file_bytes

    if not str(path).strip():  # ``--public-key "$UNSET"`` must not skip the check unseen
        raise InputError("the public key is an empty path: name the PEM file to check against")
    try:
        data = read_file_bytes(path, what="public key", max_bytes=MAX_KEY_BYTES)
    except ConfigError as exc:
        raise InputError(str(exc)) from None
    if b"PRIVATE KEY-----" in data:  # alone, or beside a public key the reader would take
        raise InputError(
            f"{path}: a private key; a public key is needed "
            "(openssl pkey -in KEY.pem -pubout -out KEY.pub.pem)"
        )
    try:
        key: Any = serialization.load_pem_public_key(data)
    except ValueError as exc:
        raise InputError(f"{path}: not a PEM public key") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise InputError(f"{path}: not an Ed25519 public key ({type(key).__name__})")
    return PublicKey(key, source=str(path))


def load_public_keys(paths: list[str] | tuple[str, ...]) -> PublicKey:
    """The public key of one PEM file, or a :class:`KeyRing` of several (each file read
    by :func:`load_public_key`)."""
    keys = [load_public_key(path) for path in paths]
    return keys[0] if len(keys) == 1 else KeyRing(keys)


SIGNATURE_KEYS = frozenset({"alg", "key_id", "value"})
"""The fields of a signature object, no more and no fewer."""

SIGNATURE_BYTES = 64
"""Length of an Ed25519 signature."""

_KEY_ID = re.compile(r"[0-9a-f]{16}")


def signature_problem(signature: object) -> str | None:
    """What keeps ``signature`` from being written as :meth:`Signer.sign_text` writes one
    (``None``: nothing): an object of exactly ``alg``, ``key_id`` and ``value``, ``alg``
    ``ed25519``, ``key_id`` 16 lower-case hex digits, ``value`` the one base64 spelling of
    64 bytes. Needs no key; a signature written so may still not verify. Never repeats
    the signature's text (it may be a forger's)."""
    if not isinstance(signature, dict):
        return "not a signature object"
    if set(signature) != SIGNATURE_KEYS:
        return "the signature object holds other fields than alg (ed25519), key_id and value"
    if signature.get("alg") != "ed25519":
        return "the signature's alg is not ed25519, the only algorithm signatures are made with"
    key_id = signature.get("key_id")
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
        return "the signature's key_id is not 16 lower-case hex digits"
    value = signature.get("value")
    raw: bytes | None = None
    if isinstance(value, str):
        with contextlib.suppress(binascii.Error, ValueError):
            raw = base64.b64decode(value, validate=True)
    # b64decode ignores the unused low bits of the last character: 16 spellings of one
    # signature would verify, so an edited character of it would go unseen.
    if raw is None or len(raw) != SIGNATURE_BYTES or base64.b64encode(raw).decode() != value:
        return (
            "the signature's value is not the base64 of 64 bytes, written as its encoder writes it"
        )
    return None


def verify_text(
    text: str, signature: JsonObject, public_key: PublicKey
) -> Literal["valid", "invalid"]:
    """Whether ``signature`` is ``public_key``'s signature of ``text``, written exactly as
    :meth:`Signer.sign_text` writes it: the fields ``alg``, ``key_id`` and ``value`` and
    no other, ``key_id`` this key's, and ``value`` the standard base64 of 64 bytes in the
    one spelling the encoder gives (module docstring)."""
    checking = public_key.find(signature.get("key_id"))
    if signature_problem(signature) is not None or checking is None:
        return "invalid"
    raw = base64.b64decode(str(signature["value"]), validate=True)
    try:
        checking.key.verify(raw, text.encode("utf-8"))
    except InvalidSignature:
        return "invalid"
    return "valid"


def why_invalid(signature: object, public_key: PublicKey) -> str:
    """Why ``signature`` does not check with ``public_key`` (for a signature
    :func:`verify_text` found ``invalid``): signed by another key (both named by id,
    the given one by its file too), not written as a signature is, or a signature of
    other content. Never the key's text; a ``key_id`` that is not one is not repeated."""
    if not isinstance(signature, dict):
        return "the signature is not a signature object"
    if set(signature) != SIGNATURE_KEYS or signature.get("alg") != "ed25519":
        return str(signature_problem(signature))
    key_id = signature.get("key_id")
    checking = public_key.find(key_id)
    if checking is None:
        readable = isinstance(key_id, str) and _KEY_ID.fullmatch(key_id)
        by = f"key {key_id}" if readable else "a key_id that is no key's id"
        return f"signed by {by}, not by the public key given ({public_key.named()})"
    return (
        f"signed under the id of {checking.named()}, but the signature does not verify: "
        "the signed content or the signature changed"
    )


def document_detail(document: JsonObject, public_key: PublicKey) -> str | None:
    """Why :func:`document_status` is not ``signed`` (``None`` when it is)."""
    status = document_status(document, public_key)
    if status == "signed":
        return None
    if status == "unsigned":
        return "the document has no signature field"
    return why_invalid(document.get(SIGNATURE_FIELD), public_key)


def sign_document(document: JsonObject, signer: Signer) -> JsonObject:
    """``document`` with a ``signature`` field over its canonical JSON (any old one replaced)."""
    body = {k: v for k, v in document.items() if k != SIGNATURE_FIELD}
    return {**body, SIGNATURE_FIELD: signer.sign_text(canonical(body))}


def signed_kind(document: JsonObject) -> Literal["certificate", "packet", "deliberation"]:
    """What a signed JSON document is: a CONCORD certificate, a DCI decision packet, or a
    ``deliberate --json`` line holding a packet (anything else is treated as a certificate)."""
    if "packet" in document and "method" in document:
        return "deliberation"
    if "residual_objections" in document and "minority_report" in document:
        return "packet"
    return "certificate"


def document_status(document: JsonObject, public_key: PublicKey) -> Status:
    """``signed``, ``unsigned`` (no ``signature`` field) or ``invalid``."""
    if SIGNATURE_FIELD not in document:
        return "unsigned"
    signature = document[SIGNATURE_FIELD]
    if not isinstance(signature, dict):
        return "invalid"
    body = {k: v for k, v in document.items() if k != SIGNATURE_FIELD}
    try:
        text = canonical(body)
    except ValueError:
        return "invalid"
    return "signed" if verify_text(text, signature, public_key) == "valid" else "invalid"
