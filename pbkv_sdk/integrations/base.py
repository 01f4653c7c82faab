"""The one shape of every framework integration: an :class:`Instrumentor` with typed :class:`Options`.

The shape follows OpenTelemetry's ``BaseInstrumentor`` (which OpenInference and OpenLLMetry
instrumentors subclass): one instrumentor per integration, ``instrument()`` / ``uninstrument()``
idempotent, and a dependency check (:meth:`Instrumentor.instrumentation_dependencies`) before
anything is installed. What each integration used to keep for itself lives here once:

* the holder (the installed handle, the options it was installed with, the process-wide
  stamping of :mod:`pbkv_sdk.autopatch` held under the integration's name);
* warn-once (:attr:`Instrumentor.warn`, a :class:`~pbkv_sdk.once.WarnOnce` per integration);
* the options: :class:`Options`, one typed object, and the one keyword signature of
  :meth:`Instrumentor.instrument` that the modules' ``instrument(...)`` functions are;
* the cancellation set (:data:`CANCELLED`, :func:`end_status`).

Lifecycle: ``instrument(options)`` installs; called again with the same options it changes
nothing (one stamp per request); with other options it uninstalls and installs again with them
(the latest call wins, as before). ``uninstrument()`` removes everything (no-op if nothing is
installed); ``instrument()`` afterwards works again. A missing framework is one warning line, and
nothing is installed: the app runs, unstamped (the SDK fails open).

Each integration module is light (this file, the instrumentor subclass, the ``instrument`` /
``uninstrument`` functions); the framework-facing classes live in a sibling module imported by
``_install`` only, so the dependency check can run before the framework is imported.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import importlib.util
import logging
import os
import threading
from typing import Any, ClassVar

from pbkv_contract.extras import install_hint
from pbkv_sdk import autopatch
from pbkv_sdk.context import Workflow, workflow_or_fresh
from pbkv_sdk.once import WarnOnce

__all__ = ["CANCELLED", "CANCELLED_NAMES", "Instrumentor", "MissingDependency", "Options", "end_status"]

#: Exceptions that end a run ``cancelled`` (any other exception: ``failed``): a cancelled task,
#: a generator closed early (the caller stopped consuming a stream), Ctrl-C.
CANCELLED: tuple[type[BaseException], ...] = (asyncio.CancelledError, GeneratorExit, KeyboardInterrupt)
#: Their class names, for tracing systems that record exceptions by type name (OpenTelemetry).
CANCELLED_NAMES: frozenset[str] = frozenset(t.__name__ for t in CANCELLED)


def end_status(error: BaseException) -> str:
    """``"cancelled"`` for an exception in :data:`CANCELLED`, else ``"failed"``."""
    return "cancelled" if isinstance(error, CANCELLED) else "failed"


@dataclasses.dataclass(frozen=True)
class Options:
    """What every integration's workflows are made with; ``None`` means the environment's default.

    Attributes:
        app: application name (``$PBKV_APP`` wins when set, for ``pbkv-sdk record --app``).
        server_url: PBKV server base URL for end signals (default ``$PBKV_SERVER_URL``, else the
            LLM's own origin).
        trace_path: JSONL trace to record into (default ``$PBKV_TRACE_PATH``; none if unset).
        end_timeout_s: time budget of each end signal, seconds (default ``$PBKV_END_TIMEOUT_S``, 0.5).
        body_hints: also send ``custom_params.pbkv`` (default ``$PBKV_BODY_HINTS``).
        kv_hints: also send the engines' KV-hint envelope (default ``$PBKV_KV_HINTS``;
            :mod:`pbkv_sdk.kv_hints`).
    """

    app: str | None = None
    server_url: str | None = None
    trace_path: str | os.PathLike[str] | None = None
    end_timeout_s: float | None = None
    body_hints: bool | None = None
    kv_hints: bool | None = None

    def workflow(self, workflow_id: object = None) -> Workflow:
        """A new workflow with these options; a malformed ``workflow_id`` is replaced (fail open)."""
        return workflow_or_fresh(self.app, workflow_id, server_url=self.server_url, trace_path=self.trace_path,
                                 end_timeout_s=self.end_timeout_s, body_hints=self.body_hints, kv_hints=self.kv_hints)

    def over(self, defaults: Options | None) -> Options:
        """These options, each ``None`` field taken from ``defaults`` (e.g. the instrumented ones)."""
        if defaults is None:
            return self
        return Options(**{f.name: getattr(self, f.name) if getattr(self, f.name) is not None else getattr(defaults, f.name)
                          for f in dataclasses.fields(self)})


class MissingDependency(ImportError):
    """A framework module an integration needs is not installed; the message is one line."""


class Instrumentor:
    """One integration: installs into its framework, holds what it installed, removes it again.

    Subclasses set the class attributes and implement :meth:`_install` / :meth:`_uninstall`;
    the module of each integration has one instance and exports its bound ``instrument`` and
    ``uninstrument``.

    Class attributes:
        name: the integration's name (also its :mod:`pbkv_sdk.autopatch` holder).
        extra: the pbkv install extra that brings the framework (named in the missing-dependency line).
        dependencies: ``(distribution requirement, top-level module)`` pairs the integration needs.
        extra_options: integration-specific keyword arguments of :meth:`instrument` (beyond :class:`Options`).
        implementation: the module holding the framework-facing classes (imported after the check).
    """

    name: ClassVar[str]
    extra: ClassVar[str]
    dependencies: ClassVar[tuple[tuple[str, str], ...]]
    extra_options: ClassVar[tuple[str, ...]] = ()
    implementation: ClassVar[str]

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._handle: Any = None
        self._options: Options | None = None
        self._extra: dict[str, Any] = {}
        #: Warn once per kind of trouble (every run of an app would repeat it).
        self.warn = WarnOnce(logging.getLogger(f"pbkv_sdk.integrations.{self.name.replace('-', '_')}"))

    # ----------------------------------------------------------------- state

    @property
    def is_instrumented(self) -> bool:
        """Whether :meth:`instrument` installed something that :meth:`uninstrument` has not removed."""
        return self._handle is not None

    @property
    def handle(self) -> Any:
        """What :meth:`instrument` returned (the callback handler, processor...), or ``None``."""
        return self._handle

    @property
    def options(self) -> Options | None:
        """The options installed with, or ``None`` when not instrumented."""
        return self._options

    # ----------------------------------------------------------------- dependencies

    def instrumentation_dependencies(self) -> tuple[str, ...]:
        """The distributions (with version ranges) this integration instruments."""
        return tuple(requirement for requirement, _ in self.dependencies)

    def missing_dependency(self) -> str | None:
        """One line naming the first needed module that is not installed, or ``None``."""
        for requirement, module in self.dependencies:
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):  # a parent package missing, or a broken one
                found = False
            if not found:
                return (f"PBKV: the {self.name} integration needs {requirement} (Python module {module!r} is not "
                        f"installed); {install_hint(self.extra)}")
        return None

    def implementation_module(self) -> Any:
        """The framework-facing module; raises :class:`MissingDependency` (one line) without the framework."""
        problem = self.missing_dependency()
        if problem is not None:
            raise MissingDependency(problem)
        return importlib.import_module(self.implementation)

    # ----------------------------------------------------------------- lifecycle

    def instrument(
        self,
        app: str | None = None,
        server_url: str | None = None,
        trace_path: str | os.PathLike[str] | None = None,
        *,
        end_timeout_s: float | None = None,
        body_hints: bool | None = None,
        kv_hints: bool | None = None,
        options: Options | None = None,
        **extra: Any,
    ) -> Any:
        """Install the integration for the whole process; idempotent.

        Args:
            app, server_url, trace_path, end_timeout_s, body_hints, kv_hints: the fields of
                :class:`Options` (each ``None``: the environment's default).
            options: an :class:`Options` instead of the fields (not both).
            extra: the integration's own options (:attr:`extra_options`, e.g. OpenTelemetry's
                ``tracer_provider``).

        Returns:
            The integration's handle (see each module), the same object when called again with
            the same options; ``None`` when the framework is missing (one warning, nothing installed).

        Raises:
            TypeError: an unknown keyword argument, or ``options`` together with its fields.
        """
        unknown = sorted(set(extra) - set(self.extra_options))
        if unknown:
            raise TypeError(f"{self.name} instrument() got unexpected keyword argument(s): {', '.join(unknown)}")
        fields = Options(app, server_url, trace_path, end_timeout_s, body_hints, kv_hints)
        if options is not None and fields != Options():
            raise TypeError("pass either options= or its fields, not both")
        options = options if options is not None else fields
        with self._lock:
            if self._handle is not None and options == self._options and extra == self._extra:
                autopatch.acquire(self.name)  # idempotent; re-held if someone released it directly
                return self._handle
            problem = self.missing_dependency()
            if problem is not None:
                self.warn("dependency", problem)
                return None
            self.uninstrument()
            autopatch.acquire(self.name)
            try:
                handle = self._install(options, **extra)
            except BaseException:
                autopatch.release(self.name)
                raise
            self._handle, self._options, self._extra = handle, options, dict(extra)
            return handle

    def uninstrument(self) -> None:
        """Remove what :meth:`instrument` installed and release the stamping (no-op if nothing)."""
        with self._lock:
            handle, self._handle, self._options, self._extra = self._handle, None, None, {}
            try:
                if handle is not None:
                    self._uninstall(handle)
            finally:
                autopatch.release(self.name)

    # ----------------------------------------------------------------- per integration

    def _install(self, options: Options, **extra: Any) -> Any:
        """Install into the framework; returns the handle (never ``None``)."""
        raise NotImplementedError

    def _uninstall(self, handle: Any) -> None:
        """Remove what :meth:`_install` installed (``handle`` is what it returned)."""
        raise NotImplementedError

    def forward(self, name: str) -> Any:
        """Module ``__getattr__`` of a light integration module: its framework-facing names."""
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.implementation_module(), name)

    def exports(self) -> tuple[Any, Any, Any]:
        """``instrument, uninstrument, __getattr__`` of the integration's module."""
        return self.instrument, self.uninstrument, self.forward
