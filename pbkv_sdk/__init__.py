"""PBKV client SDK: hint protocol v1, request stamping, trace format v1 and framework callbacks.

The core of this package depends on httpx only; framework integrations under
``pbkv_sdk.integrations`` import their framework lazily.
"""

from pbkv_sdk.context import Workflow, agent, current_agent, current_workflow, workflow
from pbkv_sdk.ending import end_workflow
from pbkv_contract.hints import END_AGENT, Hints, HintError, parse_hints
from pbkv_sdk.stamping import AsyncPBKVTransport, PBKVTransport, async_http_client, http_client, wrap_client
from pbkv_contract.trace import InvocationRecord, TraceFormatError, WorkflowEndRecord, read_trace
from pbkv_contract.blocks import prefix_hashes
from pbkv_contract.features import request_features

__all__ = [
    "Workflow",
    "workflow",
    "agent",
    "current_workflow",
    "current_agent",
    "end_workflow",
    "http_client",
    "async_http_client",
    "wrap_client",
    "PBKVTransport",
    "AsyncPBKVTransport",
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
