"""TLS for the whole service (``--tls-cert``/``--tls-key``): the certificate chain and its
private key, PEM files, read and checked (by OpenSSL, through :mod:`ssl`) before the service
creates anything, so a missing, unreadable or mismatched file is one line naming it rather
than gRPC's "Server did not start properly"."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from carbonlite.errors import InvalidOptionError

__all__ = ["TlsFiles", "tls_files"]

_PEM = b"-----BEGIN "


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """A PEM certificate chain and its PEM private key, as bytes."""

    cert: bytes
    key: bytes


def _pem(path: object, option: str, what: str) -> bytes:
    if not isinstance(path, str) or not path:
        raise InvalidOptionError(f"{option} must be the path of a PEM file, not {path!r}")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise InvalidOptionError(
            f"{option} {path!r} cannot be read: {exc.strerror or exc}"
        ) from None
    if _PEM not in data:
        raise InvalidOptionError(
            f"{option} {path!r} is not a PEM file (no '-----BEGIN' line): give the {what} in "
            "PEM form"
        )
    return data


def tls_files(cert: str | None, key: str | None) -> TlsFiles | None:
    """The certificate and key to serve TLS with (None: plaintext); both or neither."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        given, missing = ("--tls-cert", "--tls-key") if key is None else ("--tls-key", "--tls-cert")
        raise InvalidOptionError(
            f"{given} needs {missing} too: TLS takes the certificate chain and its private key"
        )
    files = TlsFiles(
        _pem(cert, "--tls-cert", "certificate chain"), _pem(key, "--tls-key", "private key")
    )
    try:  # OpenSSL checks the chain, the key and that they belong together
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        raise InvalidOptionError(
            f"--tls-cert {cert!r} and --tls-key {key!r} cannot serve TLS together: "
            f"{exc.reason or exc} (is the key the certificate's, unencrypted, in PEM?)"
        ) from None
    return files
