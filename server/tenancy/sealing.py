"""Tenants' provider keys at rest: sealed with Fernet (AES-128-CBC + HMAC-SHA256) under the
server's TIERANK_SECRET_KEY, so a copy of the database alone reveals none of them."""

from __future__ import annotations

import os

from cryptography.fernet import Fernet, InvalidToken

SECRET_KEY_ENV = "TIERANK_SECRET_KEY"


class SealingError(Exception):
    """No usable server key, or a sealed value it cannot open; the message is for operators."""


class Sealer:
    def __init__(self, secret_key: str | None) -> None:
        self._fernet: Fernet | None = None
        if secret_key:
            try:
                self._fernet = Fernet(secret_key.encode())
            except ValueError:
                raise SealingError(
                    f"{SECRET_KEY_ENV} is not a Fernet key (32 url-safe base64-encoded bytes; "
                    "make one with `python -c 'from cryptography.fernet import Fernet; "
                    "print(Fernet.generate_key().decode())'`)"
                ) from None

    @classmethod
    def from_environment(cls) -> Sealer:
        return cls(os.environ.get(SECRET_KEY_ENV))

    @property
    def available(self) -> bool:
        return self._fernet is not None

    def seal(self, secret: str) -> bytes:
        if self._fernet is None:
            raise SealingError(
                f"this server has no {SECRET_KEY_ENV}, so it cannot store provider keys"
            )
        return self._fernet.encrypt(secret.encode())

    def open(self, sealed: bytes) -> str:
        if self._fernet is None:
            raise SealingError(f"this server has no {SECRET_KEY_ENV} to open provider keys with")
        try:
            return self._fernet.decrypt(sealed).decode()
        except InvalidToken:
            raise SealingError(
                f"a stored provider key cannot be opened with this {SECRET_KEY_ENV} "
                "(was the key changed?)"
            ) from None
