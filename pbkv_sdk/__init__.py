"""PBKV client SDK: hint protocol v1, request stamping, trace format v1 and framework callbacks.

The core of this package depends on httpx only; framework integrations under
``pbkv_sdk.integrations`` import their framework lazily.
"""

from pbkv_sdk.protocol import END_AGENT, Hints, HintError, parse_hints
from pbkv_sdk.trace import (
    InvocationRecord,
    TraceFormatError,
    WorkflowEndRecord,
    prefix_hashes,
    read_trace,
    request_features,
)

__all__ = [
    "END_AGENT",
    "Hints",
    "HintError",
    "parse_hints",
    "InvocationRecord",
    "WorkflowEndRecord",
    "TraceFormatError",
    "prefix_hashes",
    "request_features",
    "read_trace",
]
__version__ = "0.1.0"
