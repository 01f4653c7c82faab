"""Settings of one pbkv-server instance: the CLI's options, also usable from Python.

Each field that is a ``pbkv-server`` option says so with :func:`pbkv_contract.settings.option`
(its help line and bounds); ``pbkv_server.cli.server`` generates the command line from these
fields, so a server setting is written here once.
"""

from __future__ import annotations

from dataclasses import dataclass

from pbkv_contract.settings import option
from pbkv_server.hardware.profiles import MAX_KV_TOKENS
from pbkv_server.engine.types import DEFAULT_ENGINE_MODEL, DEFAULT_PREFILL_COST, ENGINE_MODELS, PREFILL_COSTS
from pbkv_server.engine.policies import DEFAULT_POLICY, policy_info

#: Largest ``--pace``: each simulated second then takes 1000 wall seconds. A larger pace makes a
#: request wait hours (``1e308`` overflowed the sleep and held every request for ever).
MAX_PACE = 1000.0

__all__ = ["ServerConfig", "DEFAULT_MAX_BODY_BYTES", "DEFAULT_MAX_HEADER_BYTES", "DEFAULT_MAX_HEADERS",
           "DEFAULT_MAX_JSON_DEPTH", "DEFAULT_READ_TIMEOUT_S"]


#: Largest accepted request body: 16 MiB holds a ~4M-character prompt, far beyond any context window.
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024

#: Largest request head (request line + headers), in bytes: nginx's and Node's limits are 8-16 KiB;
#: 16 KiB still holds an 8 KiB header value (regression case 10) next to a client's usual headers.
DEFAULT_MAX_HEADER_BYTES = 16 * 1024

#: Most header fields per request (Apache's LimitRequestFields default).
DEFAULT_MAX_HEADERS = 100

#: Deepest JSON nesting of a request body; OpenAI bodies nest about 6 levels (tool parameter
#: schemas a few more), and Python walkers must never meet a body near the recursion limit.
DEFAULT_MAX_JSON_DEPTH = 64

#: Seconds a client may pause while sending a request (its head or body) before it is answered 408
#: and closed: a body shorter than its Content-Length otherwise holds its connection forever
#: (uvicorn's ``timeout_keep_alive`` runs only between requests). nginx's client_body_timeout is 60 s.
DEFAULT_READ_TIMEOUT_S = 60.0


@dataclass
class ServerConfig:
    """Everything a server needs; the fields made with ``option`` are ``pbkv-server``'s options.

    Attributes:
        engine: ``"sim"`` (embedded engine core + cost model) or ``"sglang"`` (CLI only).
        policy: eviction policy name (``pbkv_server.engine.available_policies()``).
        profile: hardware profile name (``pbkv_server.hardware.profiles``); ``None`` = that module's default.
        predictors: app name -> predictor spec (``context``, ``markov``, ``uniform``, or a model PATH); the key
            ``"*"`` applies to every app without its own entry. Left empty, a predictive policy
            (``policy_info(policy).predictive``) gets ``{"*": "context"}`` (online, cold start;
            :data:`~pbkv_server.predictors.factory.DEFAULT_ONLINE_PREDICTOR`).
            A list is read as the command line's ``--predictor`` values (``APP=SPEC`` or ``SPEC``,
            :func:`pbkv_server.predictors.per_app.parse_predictor_flags`).
        scenario: ``module:ClassName`` of the scenario used for apps without a registered one.
        host: bind address (loopback by default: the server has no authentication on LLM routes).
        port: TCP port; 0 picks a free one (see ``ServerHandle.url``).
        pace: 0 = answer as fast as the engine steps; p > 0 = sleep p x the simulated step time.
        trace_out: path of a server-side v1 trace (JSONL, with ``block_tokens``) of hinted requests.
        hint_token: shared secret required on the hint endpoints that change server state (workflow
            end, app graph), sent as ``Authorization: Bearer`` or ``X-PBKV-Hint-Token``; ``None`` =
            no check. An empty or blank token is rejected (it would read as "auth on" but check nothing).
        device_tokens: device KV capacity in tokens (overrides the profile).
        host_tokens: host KV capacity in tokens (overrides the profile); left ``None`` with
            ``device_tokens`` or ``host_ratio`` set, it is filled in as
            ``pbkv_server.hardware.profiles.host_tokens_for`` says (``host_ratio`` x device, default ratio 2).
        host_ratio: host KV tier / device capacity (0 = no host tier); ``None`` = 2 (SGLang
            HiCache's default) when ``device_tokens`` is set, else the profile's host size.
        idle_retire_s: wall seconds without a request after which a workflow is retired;
            ``None`` (or 0, the command line's spelling) = never.
        horizon: K, predicted steps per workflow. gamma: score decay. rho: pbkv-aggressive share.
        max_batch: engine's continuous-batching limit (requests running at once).
        max_body_bytes: larger request bodies are answered 413 (checked on ``Content-Length``
            before reading, and while reading a body sent without one).
        max_header_bytes: request line + headers larger than this are answered 431 (414 for the
            request line alone) by the HTTP protocol layer, before anything is buffered beyond it.
        max_headers: requests with more header fields are answered 431.
        read_timeout_s: a request whose next bytes (head or body) do not come within this many
            seconds is answered 408 and its connection closed, by the HTTP protocol layer.
        max_json_depth: bodies nested deeper are answered 400 (``invalid_json``).
        max_prompt_tokens: tokenization budget per request; a longer prompt is answered 400
            (``context_length_exceeded``) without being tokenized past the budget. ``None`` = the
            device KV capacity minus one output token (a longer prompt could never run).
        max_active_workflows: active-workflow table bound; the least recently seen is retired beyond it.
        max_ended_ids: how many ended workflow ids are remembered (LRU) for idempotent end signals.
        block_chars: characters per cache block (``pbkv_contract.blocks.prefix_hashes``).
        page_size: KV page size in tokens (SGLang's ``--page-size``): the engine caches whole pages
            only and evicts page by page; 1 (token granularity, SGLang's default) by default.
        seed: seeds the scenario's random source (replies are a function of seed, workflow, step, agent).
        model_name: the model id reported by ``/v1/models``.
        lru_guard: run the robustness guard of the predictive policies (``EngineConfig.lru_guard``;
            ``pbkv-server --no-lru-guard`` turns it off).
        prefill_cost, engine_model: the cost and engine model (``EngineConfig``; docs/cost-model.md).
    """

    engine: str = option("sim", "sim (embedded engine core, CPU) | sglang (SGLang + PBKV plugin) | vllm (vLLM + PBKV "
                                "plugin).")
    policy: str = option(DEFAULT_POLICY, "Cache policy (list them with: pbkv-bench policies).")
    profile: str | None = option(None, "Hardware profile (pbkv_server.hardware.profiles); default: its DEFAULT_PROFILE.")
    predictors: dict[str, str] = option(
        default_factory=list, flag="--predictor", cli_type=list[str],
        help="APP=SPEC or SPEC (all other apps); SPEC = context (default) | markov | uniform | PATH (trained "
             "model). Repeatable.")
    scenario: str | None = option(None, "module:ClassName answering apps without a registered scenario.")
    host: str = option("127.0.0.1", "Bind address (loopback by default).")
    port: int = option(8000, "TCP port (0 = any free port).")
    # no click bound: nan passed one as "greater than or equal to 0"; ServeSettings says the range
    pace: float = option(0.0, f"0 = as fast as possible; p = sleep p x simulated time (at most {MAX_PACE:g}).")
    trace_out: str | None = option(None, "Write a server-side v1 trace (JSONL, with block_tokens).")
    hint_token: str | None = option(None, "Shared secret for the hint endpoints.", envvar="PBKV_HINT_TOKEN")
    device_tokens: int | None = option(None, "Device KV capacity in tokens (overrides the profile).", min=1,
                                       max=MAX_KV_TOKENS)
    host_tokens: int | None = option(None, "Host KV capacity in tokens (overrides the profile and --host-ratio).",
                                     min=0, max=MAX_KV_TOKENS)
    host_ratio: float | None = option(
        None, "Host KV tier = RATIO x device capacity, 0 = none (default: 2, SGLang HiCache's, with --device-tokens; "
              "else the profile's host size).", min=0.0)
    idle_retire_s: float | None = option(600.0, "Retire workflows idle this many wall seconds (0 = never).")
    page_size: int = option(1, "KV page size in tokens (SGLang --page-size): whole pages are cached and evicted.",
                            min=1)
    seed: int = option(0, "Seed of the scenario's replies.")
    horizon: int = 3
    gamma: float = 0.7
    rho: float = 0.1
    max_batch: int = 256
    max_body_bytes: int = option(DEFAULT_MAX_BODY_BYTES, "Larger request bodies get 413.", min=1)
    max_header_bytes: int = option(DEFAULT_MAX_HEADER_BYTES, "Larger request heads get 431 (414 for the request "
                                                             "line).", min=1024)
    max_headers: int = option(DEFAULT_MAX_HEADERS, "Requests with more header fields get 431.", min=1)
    read_timeout_s: float = option(DEFAULT_READ_TIMEOUT_S, "A request whose next bytes (head or body) take longer "
                                                           "gets 408 and its connection closes.", min=0.001)
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    max_prompt_tokens: int | None = option(
        None, "Tokenization budget per request (default: the device KV capacity); longer prompts get 400.", min=1)
    max_active_workflows: int = 100_000
    max_ended_ids: int = 100_000
    block_chars: int = 64
    model_name: str = "pbkv-sim"
    lru_guard: bool = option(True, "Robustness guard of he/pbkv/pbkv-aggressive: LRU order while a ghost LRU would "
                                   "hit more (--no-lru-guard: always the predicted order).")
    prefill_cost: str = option(DEFAULT_PREFILL_COST, f"Prefill cost model ({' | '.join(PREFILL_COSTS)}; "
                                                      "docs/cost-model.md).")
    engine_model: str = option(DEFAULT_ENGINE_MODEL, f"Engine model ({' | '.join(ENGINE_MODELS)}): SGLang's admission, "
                                                      "retraction and chunked prefill, or the legacy reserve-all one.")

    def __post_init__(self) -> None:
        if not isinstance(self.predictors, dict):  # the command line's APP=SPEC / SPEC values
            from pbkv_server.predictors.per_app import parse_predictor_flags

            self.predictors = parse_predictor_flags(list(self.predictors))
        if self.idle_retire_s == 0:
            self.idle_retire_s = None  # the command line's "0 = never"
        if not self.predictors and _predictive(self.policy):
            from pbkv_server.predictors.factory import DEFAULT_ONLINE_PREDICTOR

            self.predictors = {"*": DEFAULT_ONLINE_PREDICTOR}
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535 (0 = any free port), got {self.port}")
        if self.hint_token is not None and not self.hint_token.strip():
            raise ValueError("hint_token must not be empty (leave it unset to accept hints without a token)")
        if not 0 <= self.pace <= MAX_PACE:  # also refuses nan
            raise ValueError(f"pace must be a number from 0 to {MAX_PACE:g}, got {self.pace:g}")
        if self.idle_retire_s is not None and self.idle_retire_s <= 0:
            raise ValueError("idle_retire_s must be > 0 (or 0 or None to disable)")
        for name in ("max_body_bytes", "max_active_workflows", "max_ended_ids", "block_chars", "max_batch",
                     "page_size", "max_headers", "max_json_depth"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if not self.read_timeout_s > 0 or self.read_timeout_s == float("inf"):
            raise ValueError(f"read_timeout_s must be a positive number of seconds, got {self.read_timeout_s}")
        if self.max_header_bytes < 1024:
            raise ValueError("max_header_bytes must be >= 1024 (a request head needs a few hundred bytes)")
        for name in ("device_tokens", "host_tokens"):
            tokens = getattr(self, name)
            if tokens is not None and tokens > MAX_KV_TOKENS:
                raise ValueError(f"{name} must be at most {MAX_KV_TOKENS:,}, got {tokens:,}")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 1:
            raise ValueError("max_prompt_tokens must be >= 1 (or None for the device capacity)")
        if self.host_tokens is None and (self.device_tokens is not None or self.host_ratio is not None):
            self.host_tokens = _host_tokens(self.profile, self.device_tokens, self.host_ratio)


def _host_tokens(profile: str | None, device_tokens: int | None, host_ratio: float | None) -> int | None:
    """Host capacity from a device size and/or ratio; ``None`` for an unknown profile (reported later,
    with the known names, when the engine is configured). Raises ``ValueError`` for a bad ratio."""
    from pbkv_server.hardware.profiles import DEFAULT_PROFILE, get_profile, host_tokens_for

    try:
        hardware = get_profile(profile or DEFAULT_PROFILE)
    except KeyError:
        return None
    return host_tokens_for(hardware, device_tokens, None, host_ratio)


def _predictive(policy: str) -> bool:
    """Whether ``policy`` uses predictions (an unknown name is reported later, by the engine config)."""
    try:
        return policy_info(policy).predictive
    except ValueError:
        return False
