"""Fixtures of the SGLang plugin tests (run in .venv-sglang: ``.venv-sglang/bin/python -m pytest tests/sglang``).

Each test module starts with ``pytest.importorskip("sglang.srt.plugins")``, so this directory skips
cleanly where SGLang is not installed (the main .venv); nothing here imports SGLang at module level.
(Plain ``importorskip("sglang")`` would not do: with ``tests/`` on ``sys.path`` this very directory
imports as a namespace package named ``sglang``.)
"""

from __future__ import annotations

import importlib.util
from array import array

import pytest

from pbkv_contract.prediction import Prediction, Predictor

_SPEC = importlib.util.find_spec("sglang")
HAVE_SGLANG = _SPEC is not None and _SPEC.origin is not None  # a namespace package is this directory


def pytest_report_header(config):
    return f"sglang importable: {HAVE_SGLANG}" + ("" if HAVE_SGLANG else " (tests/sglang are skipped)")


@pytest.fixture(scope="session")
def plugins_loaded():
    """SGLang's own ``load_plugins()`` (entry point discovery), once, plus scheduler-side server args."""
    pytest.importorskip("sglang.srt.plugins")
    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    load_plugins()
    set_global_server_args_for_scheduler(ServerArgs(model_path="dummy", page_size=1))
    return True


class CacheHarness:
    """A real ``PBKVRadixCache`` on CPU pools (``MHATokenToKVPool(device="cpu")``), page size 1."""

    def __init__(self, policy: str, kv_tokens: int = 256, policy_config: dict | None = None):
        from pbkv_server.testing.sglang.cpu_cache import build_cpu_cache

        self.cache, self.allocator = build_cpu_cache(policy, kv_tokens, policy_config, pbkv=policy != "lru")
        self._rid = 0

    def insert(self, tokens):
        """Insert ``tokens`` with freshly allocated KV slots (what a finished prefill does)."""
        from sglang.srt.mem_cache.base_prefix_cache import InsertParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        value = self.allocator.alloc(len(tokens))
        return self.cache.insert(InsertParams(key=RadixKey(array("q", tokens)), value=value))

    def request(self, tokens, hints: dict | None):
        """A real SGLang ``Req`` whose sampling params carry ``custom_params.pbkv = hints``."""
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        self._rid += 1
        custom = {"pbkv": hints} if hints is not None else None
        return Req(f"r{self._rid}", "", array("q", tokens), SamplingParams(max_new_tokens=1, custom_params=custom))

    def serve(self, tokens, hints: dict | None):
        """What the scheduler does with one request that finishes after its prefill: match the
        prompt (SGLang's ``match_prefix`` with the request: invocation + matched path), admit it
        (the prefill-batch hook, :mod:`~pbkv_server.backends.sglang.admission`), insert it, then
        record the inserted path and the finish as ``checkpoint_into_tree`` does for a finished
        request (``observe_request`` on the new last node, ``request_finished``)."""
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        req = self.request(tokens, hints)
        match = self.cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens)), req=req))
        pbkv = hasattr(self.cache, "observe_request")  # SGLang's plain cache (lru baseline) has none
        if pbkv:
            req.last_node = match.last_device_node
            self.cache.request_admitted(req)
        result = self.insert(tokens)
        if pbkv:
            self.cache.observe_request(req, result.last_device_node)
            req.last_node = result.last_device_node
            self.cache.request_finished(req)
        return result

    def arrive(self, tokens, hints: dict | None):
        """A request the scheduler queued and has not admitted yet (the queue hook,
        :func:`~pbkv_server.backends.sglang.admission.request_queued`). Returns it."""
        req = self.request(tokens, hints)
        self.cache.request_arrived(req)
        return req

    def run_request(self, prompt, output, hints: dict | None):
        """A request through the scheduler's cache calls: ``match_prefix`` at admission, a
        req_to_token row with KV slots for prompt + output, then SGLang's ``checkpoint`` (the insert
        done on finish / chunk end). Returns the request."""
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        req = self.request(prompt, hints)
        match = self.cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", prompt)), req=req))
        req.last_node = match.last_device_node
        req.lock = self.cache.lock(match.last_device_node)
        pool = self.cache.req_to_token_pool
        pool.alloc([req])
        n = len(prompt) + len(output)
        pool.write((req.kv.req_pool_idx, slice(0, n)), self.allocator.alloc(n))
        req.kv.kv_allocated_len = n
        req.full_untruncated_fill_ids = array("q", list(prompt) + list(output))
        self.cache.checkpoint(req, up_to=n)
        return req

    def nodes(self):
        """Live nodes except the root: first token of the node's key -> node."""
        tree = self.cache.tree_core
        return {node.key.token_ids[0]: node for node in tree._node_arena.values()
                if node is not tree.root_node and node.key is not None and len(node.key) > 0}

    def evict_one(self):
        """Evict one leaf through SGLang's own eviction walk; returns its first token."""
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        before = set(self.nodes())
        self.cache.evict(EvictParams(num_tokens=1))
        gone = before - set(self.nodes())
        assert len(gone) == 1, f"expected one victim, got {gone}"
        return gone.pop()

    def eviction_order(self):
        """Evict everything evictable, one leaf at a time; the first tokens in eviction order."""
        order = []
        while self.cache.evictable_size() > 0:
            order.append(self.evict_one())
        return order


@pytest.fixture
def harness(plugins_loaded):
    """Factory: ``harness(policy, kv_tokens=256, policy_config=None)`` -> :class:`CacheHarness`."""
    return CacheHarness


class TablePredictor(Predictor):
    """A fixed predictor for tests: the K distributions depend only on the current agent."""

    TABLE = {
        "plan": [{"code": 0.6, "plan": 0.3, "<END>": 0.1}, {"test": 0.5, "code": 0.3, "<END>": 0.2},
                 {"plan": 0.4, "<END>": 0.6}],
        "code": [{"test": 0.7, "code": 0.2, "<END>": 0.1}, {"plan": 0.6, "<END>": 0.4},
                 {"code": 0.5, "<END>": 0.5}],
        "test": [{"plan": 0.2, "<END>": 0.8}, {"<END>": 1.0}, {"<END>": 1.0}],
    }

    horizon = 3

    def predict(self, queries):
        return [Prediction([dict(d) for d in self.TABLE[q.agent]]) for q in queries]



# ---------------------------------------------------------------------------- real servers


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The seeded tiny random Qwen2 model (``pbkv_server.testing.sglang.tiny_model``), built once."""
    pytest.importorskip("sglang.srt.plugins")
    from pbkv_server.testing.sglang.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


#: Servers the real-server tests share; launched together when the first of those tests starts
#: (their start-up, about 20-40 s of imports each, overlaps).
LIVE_POLICIES = ("pbkv", "lru")


@pytest.fixture(scope="session")
def live_servers(tiny_model_dir, tmp_path_factory):
    """``live_servers(policy)`` -> a running :class:`sglang_live.LiveServer`, one per policy for the
    whole session (started again if a test stopped it); all stop at the end of the session."""
    from .sglang_live import LiveServer

    logs = tmp_path_factory.mktemp("sglang-logs")
    servers = {p: LiveServer(p, tiny_model_dir, logs / f"{p}.log").launch() for p in LIVE_POLICIES}

    def get(policy: str) -> LiveServer:
        server = servers.get(policy)
        if server is None or server.exited:
            server = servers[policy] = LiveServer(policy, tiny_model_dir, logs / f"{policy}.log").launch()
        return server.wait_ready()

    try:
        yield get
    finally:
        for server in servers.values():
            server.terminate()
        for server in servers.values():
            server.stop()
