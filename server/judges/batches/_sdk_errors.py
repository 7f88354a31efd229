"""SDK exceptions of batch requests (create, poll, download, cancel) as CallErrors, classified
as the call-by-call adapters classify them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tierank.server.judges.base import FailureKind
from tierank.server.judges.bounded_http import ResponseTooLarge
from tierank.server.judges.retry import CallError, classify_status


@contextmanager
def stainless_errors(sdk: object, what: str) -> Iterator[None]:
    """For the openai and anthropic SDKs, which share one exception layout (`sdk` is the
    module: APIStatusError, APITimeoutError, APIConnectionError)."""
    status_error = sdk.APIStatusError  # type: ignore[attr-defined]
    timeout_error = sdk.APITimeoutError  # type: ignore[attr-defined]
    connection_error = sdk.APIConnectionError  # type: ignore[attr-defined]
    try:
        yield
    except ResponseTooLarge as error:
        raise error.failure() from None
    except status_error as error:
        raise classify_status(
            error.status_code, error.response.headers, f"{what}: {error.message}"
        ) from None
    except timeout_error:
        raise CallError(FailureKind.TIMEOUT, f"{what}: the SDK timed out") from None
    except connection_error as error:
        if isinstance(error.__cause__, ResponseTooLarge):  # anthropic's SDK wraps it
            raise error.__cause__.failure() from None
        raise CallError(
            FailureKind.CONNECTION_ERROR, f"{what}: connection failed: {error}"
        ) from None
