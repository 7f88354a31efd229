"""A tenant's own provider credentials ("bring your own key").

Judges built with a ProviderAccount spend on the tenant's key, through an SDK client, a breaker
and rate limiters of that tenant's own (see llm_providers.py), so that neither the tenant's
failures nor its rate-limit exhaustion reach other tenants or the server's key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# What a provider key is replaced with in the text of a failure that echoes it.
REDACTED = "[redacted]"


@dataclass(frozen=True)
class ProviderAccount:
    """Spend on `tenant`'s own key for one provider (the provider of the judge it is given to).

    The key is kept out of repr() so that no log line or traceback that shows an account shows
    the key."""

    tenant: str
    api_key: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.tenant:
            raise ValueError("a provider account needs a tenant")
        if not self.api_key:
            raise ValueError(f"tenant {self.tenant!r}'s provider account has an empty key")
