import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_MEMBER: _ClassVar[Role]
    ROLE_ADMIN: _ClassVar[Role]
    ROLE_OPERATOR: _ClassVar[Role]
ROLE_UNSPECIFIED: Role
ROLE_MEMBER: Role
ROLE_ADMIN: Role
ROLE_OPERATOR: Role

class ApiKey(_message.Message):
    __slots__ = ("name", "tenant", "role", "display_name", "create_time", "revoke_time", "certificate_subject")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    REVOKE_TIME_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_SUBJECT_FIELD_NUMBER: _ClassVar[int]
    name: str
    tenant: str
    role: Role
    display_name: str
    create_time: _timestamp_pb2.Timestamp
    revoke_time: _timestamp_pb2.Timestamp
    certificate_subject: str
    def __init__(self, name: _Optional[str] = ..., tenant: _Optional[str] = ..., role: _Optional[_Union[Role, str]] = ..., display_name: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revoke_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., certificate_subject: _Optional[str] = ...) -> None: ...

class CreateApiKeyRequest(_message.Message):
    __slots__ = ("tenant", "role", "display_name", "certificate_subject")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_SUBJECT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    role: Role
    display_name: str
    certificate_subject: str
    def __init__(self, tenant: _Optional[str] = ..., role: _Optional[_Union[Role, str]] = ..., display_name: _Optional[str] = ..., certificate_subject: _Optional[str] = ...) -> None: ...

class CreateApiKeyResponse(_message.Message):
    __slots__ = ("key", "secret")
    KEY_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    key: ApiKey
    secret: str
    def __init__(self, key: _Optional[_Union[ApiKey, _Mapping]] = ..., secret: _Optional[str] = ...) -> None: ...

class ListApiKeysRequest(_message.Message):
    __slots__ = ("tenant", "include_revoked")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_REVOKED_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    include_revoked: bool
    def __init__(self, tenant: _Optional[str] = ..., include_revoked: _Optional[bool] = ...) -> None: ...

class ListApiKeysResponse(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[ApiKey]
    def __init__(self, keys: _Optional[_Iterable[_Union[ApiKey, _Mapping]]] = ...) -> None: ...

class RevokeApiKeyRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class Quota(_message.Message):
    __slots__ = ("max_concurrent_jobs", "max_candidates", "max_watchers", "jobs_per_minute", "daily_judge_calls", "daily_input_tokens", "daily_cost_usd")
    MAX_CONCURRENT_JOBS_FIELD_NUMBER: _ClassVar[int]
    MAX_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    MAX_WATCHERS_FIELD_NUMBER: _ClassVar[int]
    JOBS_PER_MINUTE_FIELD_NUMBER: _ClassVar[int]
    DAILY_JUDGE_CALLS_FIELD_NUMBER: _ClassVar[int]
    DAILY_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DAILY_COST_USD_FIELD_NUMBER: _ClassVar[int]
    max_concurrent_jobs: int
    max_candidates: int
    max_watchers: int
    jobs_per_minute: int
    daily_judge_calls: int
    daily_input_tokens: int
    daily_cost_usd: float
    def __init__(self, max_concurrent_jobs: _Optional[int] = ..., max_candidates: _Optional[int] = ..., max_watchers: _Optional[int] = ..., jobs_per_minute: _Optional[int] = ..., daily_judge_calls: _Optional[int] = ..., daily_input_tokens: _Optional[int] = ..., daily_cost_usd: _Optional[float] = ...) -> None: ...

class Tenant(_message.Message):
    __slots__ = ("name", "quota", "provider_keys", "allow_server_provider_keys", "create_time", "update_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_KEYS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_SERVER_PROVIDER_KEYS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    quota: Quota
    provider_keys: _containers.RepeatedScalarFieldContainer[str]
    allow_server_provider_keys: bool
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., quota: _Optional[_Union[Quota, _Mapping]] = ..., provider_keys: _Optional[_Iterable[str]] = ..., allow_server_provider_keys: _Optional[bool] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SetTenantRequest(_message.Message):
    __slots__ = ("tenant", "quota", "clear_limits", "allow_server_provider_keys")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    CLEAR_LIMITS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_SERVER_PROVIDER_KEYS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    quota: Quota
    clear_limits: _containers.RepeatedScalarFieldContainer[str]
    allow_server_provider_keys: bool
    def __init__(self, tenant: _Optional[str] = ..., quota: _Optional[_Union[Quota, _Mapping]] = ..., clear_limits: _Optional[_Iterable[str]] = ..., allow_server_provider_keys: _Optional[bool] = ...) -> None: ...

class GetTenantRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class ListTenantsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTenantsResponse(_message.Message):
    __slots__ = ("tenants",)
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[Tenant]
    def __init__(self, tenants: _Optional[_Iterable[_Union[Tenant, _Mapping]]] = ...) -> None: ...

class SetProviderKeyRequest(_message.Message):
    __slots__ = ("tenant", "provider", "api_key")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    API_KEY_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    provider: str
    api_key: str
    def __init__(self, tenant: _Optional[str] = ..., provider: _Optional[str] = ..., api_key: _Optional[str] = ...) -> None: ...

class GetUsageRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class JudgeSpend(_message.Message):
    __slots__ = ("judge", "calls", "input_tokens", "output_tokens", "cost_usd")
    JUDGE_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    judge: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    def __init__(self, judge: _Optional[str] = ..., calls: _Optional[int] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cost_usd: _Optional[float] = ...) -> None: ...

class TenantUsage(_message.Message):
    __slots__ = ("tenant", "day", "today", "total", "reserved", "quota", "unfinished_jobs")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    DAY_FIELD_NUMBER: _ClassVar[int]
    TODAY_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    UNFINISHED_JOBS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    day: str
    today: _containers.RepeatedCompositeFieldContainer[JudgeSpend]
    total: _containers.RepeatedCompositeFieldContainer[JudgeSpend]
    reserved: JudgeSpend
    quota: Quota
    unfinished_jobs: int
    def __init__(self, tenant: _Optional[str] = ..., day: _Optional[str] = ..., today: _Optional[_Iterable[_Union[JudgeSpend, _Mapping]]] = ..., total: _Optional[_Iterable[_Union[JudgeSpend, _Mapping]]] = ..., reserved: _Optional[_Union[JudgeSpend, _Mapping]] = ..., quota: _Optional[_Union[Quota, _Mapping]] = ..., unfinished_jobs: _Optional[int] = ...) -> None: ...
