"""Live spans of a tracing system mapped to PBKV workflows and agents (OpenTelemetry, Agents SDK).

Tracing-based integrations see a tree of spans: a root that stands for one run (an OpenTelemetry
``invoke_agent`` span, an OpenAI Agents SDK trace), agent spans inside it, and the model-call
span around each LLM request. :class:`SpanWorkflows` keeps one node per live span: the workflow
of its nearest root ancestor and the name of its nearest agent ancestor. At request time the
integration looks up the current span (:meth:`SpanWorkflows.lookup`) and the process-wide
stamping (:mod:`pbkv_sdk.autopatch`) stamps with what it finds. Nodes are dropped when their
span ends, so memory follows the number of live spans.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from pbkv_sdk import autopatch
from pbkv_sdk.context import Workflow
from pbkv_sdk.integrations.base import CANCELLED, Options

__all__ = ["SpanWorkflows", "SpanIntegration", "handled_exception", "leaving_status"]


def handled_exception() -> BaseException | None:
    """The exception being handled right now (``sys.exc_info``); remember it when a span starts."""
    return sys.exc_info()[1]


def leaving_status(before: BaseException | None) -> str | None:
    """Status implied by the exception that is leaving a ``with`` block now, or ``None``.

    Tracing systems end spans and traces in a ``with`` block's exit, where ``sys.exc_info()`` is
    the exception unwinding through it; ``before`` is what :func:`handled_exception` said when
    the span started (an exception the caller was already handling is not this run's).

    Returns:
        ``"cancelled"`` for ``CancelledError`` / ``KeyboardInterrupt`` / ``GeneratorExit``,
        ``"failed"`` for any other exception, ``None`` when none is leaving.
    """
    error = sys.exc_info()[1]
    if error is None or error is before:
        return None
    return "cancelled" if isinstance(error, CANCELLED) else "failed"


@dataclass(slots=True)
class _Node:
    workflow: Workflow | None
    agent: str | None
    root: bool
    failed: list[bool] = field(default_factory=list)  # shared by a workflow's nodes: any failure marks it


class SpanWorkflows:
    """Span id -> (workflow, agent) for the live spans of one tracing system; thread-safe.

    Args:
        make_workflow: builds the :class:`Workflow` of a new root, from the root's id (a string
            of the protocol's workflow-id characters).
    """

    def __init__(self, make_workflow: Callable[[str], Workflow]):
        self._make_workflow = make_workflow
        self._nodes: dict[Hashable, _Node] = {}
        self._lock = threading.Lock()

    def start(self, span_id: Hashable, parent_id: Hashable | None, *, root_id: str | None = None, agent: str | None = None) -> None:
        """A span started.

        Args:
            span_id: the span's id (any hashable, unique among live spans).
            parent_id: its parent's id, or ``None``.
            root_id: if given and no ancestor belongs to a workflow yet, this span starts a new
                workflow with this id (it ends when the span ends).
            agent: the agent this span stands for, if any (inherited by its descendants).
        """
        with self._lock:
            parent = self._nodes.get(parent_id) if parent_id is not None else None
        workflow = parent.workflow if parent is not None else None
        inherited_agent = parent.agent if parent is not None else None
        root = workflow is None and root_id is not None
        failed = parent.failed if parent is not None and not root else []
        if root:
            workflow = self._make_workflow(root_id)
        node = _Node(workflow, agent or inherited_agent, root, failed)
        with self._lock:
            self._nodes[span_id] = node

    def fail(self, span_id: Hashable) -> None:
        """Mark the workflow of ``span_id`` as failed (it ends ``failed`` whatever its root says)."""
        with self._lock:
            node = self._nodes.get(span_id)
        if node is not None and node.workflow is not None:
            node.failed.append(True)

    def end(self, span_id: Hashable, status: str = "completed") -> Workflow | None:
        """A span ended; if it is a workflow root, end its workflow (``failed`` if marked so).

        Returns:
            The workflow of the span (``None`` if it had none or was unknown).
        """
        with self._lock:
            node = self._nodes.pop(span_id, None)
        if node is None:
            return None
        if node.root and node.workflow is not None:
            node.workflow.end("failed" if node.failed and status == "completed" else status)
        return node.workflow

    def lookup(self, span_id: Hashable) -> tuple[Workflow, str | None] | None:
        """``(workflow, agent)`` of a live span inside a workflow, else ``None``."""
        node = self._nodes.get(span_id)
        if node is None or node.workflow is None:
            return None
        return node.workflow, node.agent

    def workflow_of(self, span_id: Hashable) -> Workflow | None:
        """The workflow of a live span, or ``None``."""
        node = self._nodes.get(span_id)
        return node.workflow if node is not None else None

    def __len__(self) -> int:
        return len(self._nodes)


class SpanIntegration:
    """What the tracing-based integrations share: workflow options, the span tree, the memory of
    exceptions already being handled when a root started, and the resolver registration.

    Subclasses implement :meth:`resolve`. Their instrumentor turns the process-wide stamping on
    and off; :meth:`activate` / :meth:`deactivate` add and remove the resolver.

    Args:
        args, kwargs: the fields of :class:`~pbkv_sdk.integrations.base.Options`.
        options: an :class:`~pbkv_sdk.integrations.base.Options` instead.
    """

    def __init__(self, *args: Any, options: Options | None = None, **kwargs: Any):
        self.options = options if options is not None else Options(*args, **kwargs)
        #: False once uninstrumented (tracing systems cannot remove a processor): new roots are ignored.
        self.enabled = True
        self._handled_at_start: dict[Hashable, BaseException | None] = {}
        self.spans = SpanWorkflows(self.options.workflow)

    def resolve(self) -> tuple[Workflow, str | None] | None:
        """``(workflow, agent)`` of the span current in this context, or ``None``."""
        raise NotImplementedError

    def start_root(self, root_id: Hashable) -> None:
        """Remember what exception (if any) the caller is handling as root ``root_id`` starts."""
        self._handled_at_start[root_id] = handled_exception()

    def root_status(self, root_id: Hashable) -> str | None:
        """:func:`leaving_status` for root ``root_id`` (forgets it); ``None`` when nothing is leaving."""
        return leaving_status(self._handled_at_start.pop(root_id, None))

    def activate(self) -> None:
        """Register the resolver: requests sent inside this tracing system's spans get stamped."""
        autopatch.add_resolver(self.resolve)

    def deactivate(self) -> None:
        """Switch off: no new workflows, resolver unregistered."""
        self.enabled = False
        autopatch.remove_resolver(self.resolve)
