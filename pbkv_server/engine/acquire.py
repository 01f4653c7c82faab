"""What :meth:`PrefixCache.acquire <pbkv_server.engine.cache.PrefixCache.acquire>` takes and gives,
and what observes it.

:class:`AcquireRequest` is a prompt as the cache admits it (units, reservation, who asked);
:class:`Acquired` the locked prefix it returns. An :class:`AcquireObserver` sees every admission
and every cached output after the cache counted it (the LRU guard's ghost is fed this way,
:mod:`~pbkv_server.engine.guard_feed`), so the cache itself knows nothing of what watches it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol, Sequence

from .radix import Node

if TYPE_CHECKING:
    from .types import EngineRequest
    from .workflows import Workflow

__all__ = ["AcquireRequest", "Acquired", "AcquireObserver", "UniformSums"]


@dataclass(slots=True)
class AcquireRequest:
    """A request's prompt as the cache admits it.

    Attributes:
        blocks: the prompt's unit keys (a ``list``, see :mod:`~pbkv_server.engine.pages`).
        toks: tokens per unit.
        cum: prefix sums of ``toks`` (``cum[0] = 0``, ``len(toks) + 1`` entries): a list, or
            :class:`UniformSums` for units of one size but the last.
        reserve: device tokens to reserve while the request runs (output, uncached tail).
        now: engine time, seconds (the nodes' last access).
        workflow, agent: who made the request (``None`` for an anonymous request).
        active: the workflow is still active (``False``: it ended while the request waited, so
            the use counts as an ended workflow's).
        index: the request's submission index (for policies that read the future).
        uncached: prompt tokens after the last whole page, never cached: prefilled, counted in
            the prompt, and held in ``reserve``.
        request: the request, handed to the policy in its :class:`~pbkv_server.engine.Admission`.
        count: count the prompt in the hit-rate figures; ``False`` for a speculative prefill
            (counted in ``speculative_prefill_tokens`` only).
    """

    blocks: list
    toks: list
    cum: "list | UniformSums"
    reserve: int
    now: float
    workflow: "Workflow | None" = None
    agent: str | None = None
    active: bool = True
    index: int = 0
    uncached: int = 0
    request: "EngineRequest | None" = None
    count: bool = True

    @property
    def prompt_tokens(self) -> int:
        """Tokens of the whole prompt, the uncached tail included."""
        return self.cum[-1] + self.uncached


class Acquired(NamedTuple):
    """A request's prefix, locked on the device (result of :meth:`PrefixCache.acquire`).

    Attributes:
        path: nodes from the root down covering the whole prompt (root excluded).
        device_hit: prompt tokens found on the device tier.
        host_hit: prompt tokens found on the host tier (loaded over PCIe at admission).
        load: tokens copied host -> device (the nodes' sizes, which a replayed trace may count
            differently from the request's own per-block tokens).
        new_tokens: prompt tokens to prefill.
    """

    path: list[Node]
    device_hit: int
    host_hit: int
    load: int
    new_tokens: int

    @property
    def end(self) -> Node | None:
        """Deepest node of the prompt (``None`` for an empty prompt)."""
        return self.path[-1] if self.path else None


class AcquireObserver(Protocol):
    """Sees what the cache admits, after the cache counted it and before the policy's
    ``on_admit`` (observers run in the order they were added)."""

    def admitted(self, req: AcquireRequest, got: Acquired) -> None:
        """``req`` was admitted as ``got`` (its reservation already held)."""

    def output_cached(self, keys: Sequence, toks: Sequence[int]) -> None:
        """A finished request's output was kept as a new device leaf of ``keys``/``toks``."""

    def released(self, end: Node) -> None:
        """A finished request unlocked its path, from ``end`` (its last node) up."""

    def held(self, room: int) -> None:
        """Running requests' decoded KV grew (engine model ``sglang``): cached units may take
        ``room`` device tokens now (capacity minus what running requests hold)."""


class UniformSums:
    """The prefix sums of ``n`` unit token counts that are all ``size`` but the last, ``last``:
    ``cum[k] = k * size`` for ``k < n`` and ``cum[n] = (n - 1) * size + last`` (``n + 1`` entries,
    read as a list's: an int index, negative from the end).

    A block-hash trace's prompt has this shape (64-token blocks, a partial last one). Its ~1,300
    sums as a list cost ~30 us to build, one int object each, for a cache that reads a few dozen
    (one per matched node, :meth:`PrefixCache._match <pbkv_server.engine.cache.PrefixCache._match>`,
    which computes them inline from :attr:`size` and :attr:`short`).

    Attributes:
        n: units (>= 1); size: tokens of each but the last; short: ``size - last`` (tokens the
        last unit lacks; negative if it holds more); total: ``cum[n]``, the prompt's tokens.
    """

    __slots__ = ("n", "size", "short", "total")

    def __init__(self, n: int, size: int, last: int) -> None:
        self.n, self.size, self.short = n, size, size - last
        self.total = n * size - self.short

    def __len__(self) -> int:
        return self.n + 1

    def __getitem__(self, k: int) -> int:
        if k < 0:
            k += self.n + 1
        if not 0 <= k <= self.n:
            raise IndexError("prefix sum index out of range")
        return self.total if k == self.n else k * self.size

    def __eq__(self, other: object) -> bool:
        """Equal to a list of the same sums (and to sums of the same counts)."""
        if isinstance(other, UniformSums):
            return (self.n, self.size, self.short) == (other.n, other.size, other.short)
        if isinstance(other, list):
            return len(other) == self.n + 1 and all(other[k] == self[k] for k in range(self.n + 1))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which do not hash
