"""Approver key files: an Ed25519 key pair in PEM (PKCS#8 private, SubjectPublicKeyInfo
public).

Invariant: a private key file is written once (``publish_exclusive``, mode 0600) and
read only if it is owner-only (no group/other permission at all), a single-link regular
file owned by this user. A public key file is what the operator *trusts*, so it is read
with the same private-read rules minus secrecy: it must not be writable by anyone else,
or someone else could choose which approver efold trusts.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from efold.errors import Code
from efold.registry.authorization import public_key_id
from efold.registry.errors import RegistryError
from efold.registry.files import publish_exclusive, read_private

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

__all__ = ["PRIVATE_SUFFIX", "PUBLIC_SUFFIX", "load_private_key", "load_public_key",
           "write_key_pair"]

PRIVATE_SUFFIX = ".key"
PUBLIC_SUFFIX = ".pub"
_MAX_KEY_BYTES = 4096


def _split(path: str | os.PathLike[str]) -> tuple[str, str]:
    directory, name = os.path.split(os.path.abspath(os.fspath(path)))
    return directory, name


def write_key_pair(prefix: str | os.PathLike[str]) -> tuple[str, str, str]:
    """Generate a key pair; write ``PREFIX.key`` (0600) and ``PREFIX.pub`` (0644), never
    over existing files. Returns (private path, public path, key id)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    base = os.fspath(prefix)
    private_path, public_path = base + PRIVATE_SUFFIX, base + PUBLIC_SUFFIX
    publish_exclusive(*_split(private_path), private_pem, mode=0o600)
    publish_exclusive(*_split(public_path), public_pem, mode=0o644)
    return private_path, public_path, public_key_id(key.public_key())


def load_private_key(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """``PRIVATE_READ_REFUSED`` if the file is readable by group/other (or otherwise
    unsafe); ``APPROVER_KEY_INVALID`` if it is not an unencrypted Ed25519 PEM key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    data = read_private(*_split(path), max_bytes=_MAX_KEY_BYTES, owner_only=True)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise RegistryError(Code.APPROVER_KEY_INVALID, "not a PEM private key") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise RegistryError(Code.APPROVER_KEY_INVALID, "not an Ed25519 key")
    return key


def load_public_key(path: str | os.PathLike[str]) -> Ed25519PublicKey:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    data = read_private(*_split(path), max_bytes=_MAX_KEY_BYTES)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise RegistryError(Code.APPROVER_KEY_INVALID, "not a PEM public key") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise RegistryError(Code.APPROVER_KEY_INVALID, "not an Ed25519 key")
    return key
