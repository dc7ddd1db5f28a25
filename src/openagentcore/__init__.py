"""openagentcore: a typed client and a crash-safe function runner for the Agents API.

Start with :class:`Client` (or :class:`AsyncClient`) and :class:`FunctionRunner` (or
:class:`AsyncFunctionRunner`); run ``openagentcore dev`` for a local server.
"""

from ._client import AsyncClient, Client, RawResponse
from ._errors import (
    AdmissionError,
    APIConnectionError,
    APIError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    InternalServerError,
    NotFoundError,
    OpenAgentCoreError,
    PermissionDeniedError,
    RateLimitError,
    RedirectError,
    ResponseTooLargeError,
    ServiceUnavailableError,
    StreamError,
    UnprocessableEntityError,
)
from ._limits import ResponseLimits
from ._logs import setup_logging as _setup_logging
from ._operator import Resolution, resolve_call
from ._pagination import AsyncPage, SyncPage
from ._retry import RetryPolicy
from ._streaming import (
    AsyncCreationEventStream,
    AsyncEventStream,
    CreationEventStream,
    EventStream,
)
from .resources._base import CallOptions
from .runner import (
    ArgumentsError,
    AsyncFunctionRunner,
    CallContext,
    Cancellation,
    FunctionRunner,
    InDoubtCall,
    InDoubtDecision,
    RunnerError,
    ServeReport,
    ServeTimeout,
    StructuredOutputError,
    TurnResult,
    current_call,
    structured_output,
)
from .store import (
    CallKey,
    CallRecord,
    CallState,
    InvalidTransitionError,
    MemoryResultStore,
    PostgresResultStore,
    ResultStore,
    SQLiteResultStore,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreKeyError,
    StoreSchemaError,
    StoreUnavailableError,
    UnknownCallError,
)

__version__ = "0.1.0"

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIResponseValidationError",
    "APIStatusError",
    "APITimeoutError",
    "AdmissionError",
    "AsyncClient",
    "AsyncCreationEventStream",
    "AsyncEventStream",
    "ArgumentsError",
    "AsyncFunctionRunner",
    "AsyncPage",
    "AuthenticationError",
    "BadRequestError",
    "CallContext",
    "CallKey",
    "CallOptions",
    "CallRecord",
    "CallState",
    "Cancellation",
    "Client",
    "ConflictError",
    "CreationEventStream",
    "EventStream",
    "FunctionRunner",
    "InDoubtCall",
    "InDoubtDecision",
    "InternalServerError",
    "InvalidTransitionError",
    "MemoryResultStore",
    "NotFoundError",
    "OpenAgentCoreError",
    "PermissionDeniedError",
    "PostgresResultStore",
    "RateLimitError",
    "RawResponse",
    "RedirectError",
    "Resolution",
    "ResponseLimits",
    "ResponseTooLargeError",
    "ResultStore",
    "RetryPolicy",
    "RunnerError",
    "SQLiteResultStore",
    "ServeReport",
    "ServeTimeout",
    "ServiceUnavailableError",
    "StoreClosedError",
    "StoreCorruptError",
    "StoreError",
    "StoreKeyError",
    "StoreSchemaError",
    "StoreUnavailableError",
    "StreamError",
    "StructuredOutputError",
    "SyncPage",
    "TurnResult",
    "UnknownCallError",
    "UnprocessableEntityError",
    "__version__",
    "current_call",
    "resolve_call",
    "structured_output",
]

_setup_logging()
