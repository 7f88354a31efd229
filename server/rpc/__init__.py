"""The API edge: the servicers of RankService, EvalService and AdminService, the interceptor
that authenticates callers, binds request ids and turns the server's errors into
`google.rpc.Status` (rpc/statuses.py, the one place), request validation against the API's
bounds (tierank/limits.py), TLS and reflection. Below it, jobs/ and labeling/ do the work and
wire/ maps messages to domain types.
"""

from tierank.server.rpc.admin_service import ADMIN_SERVICE, AdminServicer
from tierank.server.rpc.auth import AUTH_KEYS, AUTH_NONE, Authenticator, Caller, current_caller
from tierank.server.rpc.eval_service import EVAL_SERVICE, EvalServicer
from tierank.server.rpc.interceptor import EdgeInterceptor
from tierank.server.rpc.rank_service import RankServicer

__all__ = [
    "ADMIN_SERVICE",
    "AUTH_KEYS",
    "AUTH_NONE",
    "EVAL_SERVICE",
    "AdminServicer",
    "Authenticator",
    "Caller",
    "EdgeInterceptor",
    "EvalServicer",
    "RankServicer",
    "current_caller",
]
