"""The adapters' documented exception types."""

from __future__ import annotations


class AdapterError(Exception):
    """Base of every adapter failure; the message names the provider and what failed."""


class ProviderGone(AdapterError):
    """The provider process has exited; the runtime cannot be used any more."""


class ProviderProtocolError(AdapterError):
    """The provider answered a request with an error (code and message kept)."""

    def __init__(self, method: str, code: int | str | None, message: str) -> None:
        super().__init__(f"{method}: provider error {code}: {message}")
        self.method = method
        self.code = code
        self.message = message


class ResumeError(AdapterError):
    """A native thread could not be resumed: ``reason`` is not_found, owned_elsewhere or error."""

    def __init__(self, native_thread_ref: str, reason: str, message: str) -> None:
        super().__init__(f"resume of {native_thread_ref} failed ({reason}): {message}")
        self.native_thread_ref = native_thread_ref
        self.reason = reason
        self.message = message


class StaleRequest(AdapterError):
    """An answer to a request the provider no longer waits for (answered, cancelled, dead)."""


class NotSupported(AdapterError):
    """The provider has no native way to do this (e.g. steering a Claude turn)."""


class ProviderTimeout(AdapterError):
    """The provider did not answer within the bound."""
