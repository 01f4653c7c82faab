"""``continuum``: Continuum's tool-call KV pinning (vLLM fork Hanchenli/vllm-continuum).

Source: Continuum (Li et al., arXiv 2511.02230) as released: ``vllm/v1/core/estimate_with_func.py``
(``ToolCallEstimator``) and the scheduler's ``_free_blocks`` / ``unpin_requests_regular``. When a
request of a job finishes and it is not the job's last step (the client's ``is_last_step``), the
scheduler keeps its KV blocks on the GPU (not freed, so not evictable) for the time the job's tool
call is expected to take, so the job's next turn finds its context:

- the tool is the function call parsed from the request's output, and its duration is learned
  online per tool name across all jobs: when the job's next request arrives, ``now - departure``
  of the previous one is one sample of that tool, and the estimate is the mean of the samples;
- the release pins for a fixed ``FIXED_THRESHOLD_CONTINUUM`` = 2.0 s when the tool's mean is at
  most 2.0 s or the tool has no sample yet (cold start pins); slower tools are not pinned at all;
- a pin ends when the job's next request finishes (``_free_blocks`` unpins the job's earlier
  pins), or once the deadline has passed while no request of the job waits
  (``unpin_requests_regular``, every scheduling step); as a deadlock guard, with at most one
  request running the pin that expires last is dropped.

Pinned nodes rank after every unpinned one and are never evicted while pinned (LRU otherwise,
vLLM's free-block order). Continuum's scheduler admits the waiting turns of jobs whose KV is pinned
first (``scheduling_policy = "continuum"``), so a pinned context is used
before it blocks others; :meth:`pick_waiting` does that here (the oldest such turn; otherwise the
queue is FIFO, where Continuum orders the rest by job arrival).

Modelling choices: a job is a PBKV workflow; ``is_last_step`` is :attr:`EngineRequest.last_step`
(replay: the workflow's last invocation in the trace; ``pbkv-server``: the body's ``is_last_step``);
the tool a request calls is identified by its app and agent (each agent of the examples calls one
kind of tool: HoVer's query writer retrieval, SWE-bench's coder the test run), since traces carry
no tool names; anonymous requests are never pinned. The deadlock guard fires when nothing runs
(the release checks for at most one running request).
"""

from __future__ import annotations

import heapq
import itertools

from .base import Policy, register_policy

#: Pin length and the threshold on a tool's mean duration, seconds (``FIXED_THRESHOLD_CONTINUUM``).
PIN_S = 2.0


@register_policy("continuum")
class ContinuumPolicy(Policy):
    """Unpinned ``(0, last_access)`` before pinned ``(1, last_access)``; pinned nodes never leave.

    Per-node state (kept here, keyed by node): how many jobs pin the node.
    """

    summary = "Continuum: pin a job's KV across its tool call (2 s if the tool's learned mean is <= 2 s)"
    #: what the client sends that this rule reads (--no-hints removes it: the rule replays as lru)
    client_signal = "workflow and last-step mark"

    def __init__(self, context) -> None:
        super().__init__(context)
        self._count: dict = {}  # node -> number of job pins covering it
        self._pins: dict[str, tuple] = {}  # workflow id -> (deadline, path nodes)
        self._deadlines: list = []  # (deadline, seq, workflow id), stale entries skipped
        self._seq = itertools.count()
        self._departed: dict[str, tuple[float, tuple]] = {}  # workflow id -> (finish time, tool)
        self._queued: dict[str, int] = {}  # workflow id -> its requests submitted and not yet admitted
        self._samples: dict[tuple, list[float]] = {}  # tool -> [sum of durations, count]

    def priority(self, node) -> tuple:
        """``(1 if a job pins the node else 0, last_access)``."""
        return (1 if self._count.get(node) else 0, node.last_access)

    def tool_mean(self, tool: tuple) -> float | None:
        """Mean observed duration of ``tool`` (app, agent), seconds, or ``None`` before a sample."""
        s = self._samples.get(tool)
        return s[0] / s[1] if s else None

    def pinned(self, node) -> bool:
        """True if a job pins ``node`` (expired pins are released first)."""
        self._sweep()
        return bool(self._count.get(node))

    def holds(self, node) -> bool:
        """A pinned node stays on the device (expired pins are cleared by :meth:`expire`)."""
        return bool(self._count.get(node))

    def expire(self) -> bool:
        """Release the pins whose deadline passed (see :meth:`_sweep`); True if one was."""
        return self._sweep()

    def pick_waiting(self, waiting) -> int:
        """The oldest waiting request of a job whose KV is pinned, else the queue head."""
        if self._pins:
            for i, req in enumerate(waiting):
                if req.hints is not None and req.hints.workflow_id in self._pins:
                    return i
        return 0

    def relieve(self) -> bool:
        """Deadlock guard: drop the pin whose deadline is latest."""
        if not self._pins:
            return False
        self._unpin(max(self._pins, key=lambda w: self._pins[w][0]))
        return True

    # ----------------------------------------------------------------- hooks
    def on_invocation(self, wf, previous_agent) -> None:
        """The job's next request arrived: its tool took ``now - departure`` (one sample)."""
        self._queued[wf.workflow_id] = self._queued.get(wf.workflow_id, 0) + 1
        left = self._departed.pop(wf.workflow_id, None)
        if left is not None:
            finished_at, tool = left
            s = self._samples.setdefault(tool, [0.0, 0])
            s[0] += max(0.0, self.context.now - finished_at)
            s[1] += 1

    def on_admit(self, admission, path) -> None:
        """The job's request left the waiting queue."""
        wf = admission.workflow
        if wf is not None and self._queued.get(wf.workflow_id, 0) > 0:
            self._queued[wf.workflow_id] -= 1
            if not self._queued[wf.workflow_id]:
                del self._queued[wf.workflow_id]

    def on_finish(self, request, wf, end) -> None:
        """Release the job's earlier pin; pin this request's path unless it is the last step or
        its tool is slow."""
        if wf is None:
            return
        wid = wf.workflow_id
        if wid in self._pins:
            self._unpin(wid)
        now = self.context.now
        tool = (wf.app, request.hints.agent if request.hints is not None else None)
        self._departed[wid] = (now, tool)
        if request.last_step or end is None:
            return
        mean = self.tool_mean(tool)
        if mean is not None and mean > PIN_S:
            return
        path = []
        node = end
        while node is not None and node.parent is not None:
            path.append(node)
            node = node.parent
        deadline = now + PIN_S
        self._pins[wid] = (deadline, path)
        heapq.heappush(self._deadlines, (deadline, next(self._seq), wid))
        for node in path:
            self._count[node] = self._count.get(node, 0) + 1
            if self._count[node] == 1:
                self.context.reorder(node)

    def on_workflow_end(self, wf) -> None:
        """An ended job sends no further request: forget its departure."""
        self._departed.pop(wf.workflow_id, None)

    def on_split(self, top, bottom) -> None:
        """The upper part is pinned by the jobs pinning the lower part (and joins their paths)."""
        n = self._count.get(bottom)
        if n:
            self._count[top] = n
            for _, path in self._pins.values():
                if bottom in path:
                    path.append(top)

    def on_drop(self, node) -> None:
        """Forget the node (a pinned node is never dropped; kept for safety)."""
        self._count.pop(node, None)

    # ----------------------------------------------------------------- internals
    def _sweep(self) -> bool:
        """Release pins whose deadline passed while no request of the job waits for admission;
        True if one was released."""
        heap, now = self._deadlines, self.context.now
        waiting = []
        released = False
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            pin = self._pins.get(entry[2])
            if pin is None or pin[0] != entry[0]:
                continue  # released or replaced meanwhile
            if entry[2] in self._queued:
                waiting.append(entry)  # the job's next request waits for admission: the pin waits too
            else:
                self._unpin(entry[2])
                released = True
        for entry in waiting:
            heapq.heappush(heap, entry)
        return released

    def _unpin(self, wid: str) -> None:
        _, path = self._pins.pop(wid)
        for node in path:
            n = self._count.get(node, 0) - 1
            if n > 0:
                self._count[node] = n
            else:
                self._count.pop(node, None)
                self.context.reorder(node)
