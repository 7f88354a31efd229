"""The providers' SDK exceptions as CallErrors, written once for every path that calls a vendor:
a judge's call (openai_judges, anthropic_judge, gemini_judge) and a batch's requests (create,
poll, download, cancel: batches/). A response larger than the judge allows (bounded_http) is a
CallError here too, whichever SDK carried it and however it wrapped it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx2

from tierank.server.judges.base import FailureKind
from tierank.server.judges.bounded_http import ResponseTooLarge
from tierank.server.judges.retry import CallError, classify_status

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s$")


def _about(what: str, text: str) -> str:
    return f"{what}: {text}" if what else text


@contextmanager
def stainless_errors(sdk: Any, what: str = "") -> Iterator[None]:
    """For the openai and anthropic SDKs, which share one exception layout (`sdk` is the
    module: APIStatusError, APITimeoutError, APIConnectionError). `what`: the request, named in
    the message (a batch's "creating the batch"); a judge's call names none."""
    try:
        yield
    except ResponseTooLarge as error:
        raise error.failure() from None
    except sdk.APIStatusError as error:
        text = _about(what, _status_text(error))
        raise classify_status(error.status_code, error.response.headers, text) from None
    except sdk.APITimeoutError:
        raise CallError(FailureKind.TIMEOUT, _about(what, "the SDK timed out")) from None
    except sdk.APIConnectionError as error:
        if isinstance(error.__cause__, ResponseTooLarge):  # anthropic's SDK wraps it
            raise error.__cause__.failure() from None
        text = _about(what, f"connection failed: {error}")
        raise CallError(FailureKind.CONNECTION_ERROR, text) from None


def _status_text(error: Any) -> str:
    """The SDK's message, with the body when that is plain text (the SDKs keep only JSON's)."""
    body = getattr(error, "body", None)
    if isinstance(body, str) and body and body not in error.message:
        return f"{error.message} - {body[:500]}"
    return str(error.message)


@contextmanager
def genai_errors(what: str = "") -> Iterator[None]:
    """For google-genai, whose errors are APIError, and httpx's below it. Its SDK is imported
    here, not with the module: an openai or anthropic judge never loads it (a third of a
    second)."""
    from google.genai import errors

    try:
        yield
    except ResponseTooLarge as error:
        raise error.failure() from None
    except errors.APIError as error:
        headers = error.response.headers if error.response is not None else None
        failure = classify_status(error.code, headers, _about(what, error.message or str(error)))
        if failure.retry_after_s is None:
            failure.retry_after_s = _retry_info_delay(error.details)
        raise failure from None
    except httpx2.TimeoutException:
        raise CallError(FailureKind.TIMEOUT, _about(what, "the HTTP client timed out")) from None
    except httpx2.TransportError as error:
        text = _about(what, f"connection failed: {error}")
        raise CallError(FailureKind.CONNECTION_ERROR, text) from None


def _retry_info_delay(details: object) -> float | None:
    """google.rpc.RetryInfo's retryDelay ("7s") from an error body, which Gemini sends on 429
    instead of a Retry-After header."""
    body = details.get("error", details) if isinstance(details, dict) else {}
    for detail in body.get("details", ()) if isinstance(body, dict) else ():
        if isinstance(detail, dict) and detail.get("@type", "").endswith("google.rpc.RetryInfo"):
            match = _DURATION.match(str(detail.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    return None
