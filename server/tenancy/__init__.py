"""Tenants and what they may spend: API keys (`new_key`), provider keys sealed at rest
(`Sealer`) and the account each judge call spends on (`ProviderAccounts`), quotas and slots
(quotas.py), the daily spend ledger that reserves before a call and settles after it
(`SpendLedger`), and the one paid judge call every job, grading and qualification goes through
(`PaidCalls`). Built on storage's tenant, key and spend records; used by jobs and labeling.
"""

from tierank.server.tenancy.keys import DEFAULT_TENANT, ROLE_ADMIN, ROLE_MEMBER, ROLE_OPERATOR
from tierank.server.tenancy.paid_call import PaidCalls, call_seed
from tierank.server.tenancy.provider_accounts import ProviderAccounts
from tierank.server.tenancy.quotas import EvalSlots, WatcherSlots, limits_of
from tierank.server.tenancy.sealing import Sealer, SealingError
from tierank.server.tenancy.spending import SpendLedger

__all__ = [
    "DEFAULT_TENANT",
    "ROLE_ADMIN",
    "ROLE_MEMBER",
    "ROLE_OPERATOR",
    "EvalSlots",
    "PaidCalls",
    "ProviderAccounts",
    "Sealer",
    "SealingError",
    "SpendLedger",
    "WatcherSlots",
    "call_seed",
    "limits_of",
]
