"""``pbkv-bench live-replay TRACE --target URL --concurrency C``: replay a trace against a live server.

Each workflow of the trace replays its invocations in step order (closed loop: at most C workflows
in flight; a new one starts when one ends), with its hints, then sends the workflow-end signal.
Prompts are rebuilt deterministically from the trace's ``prefix_hashes`` so that the server's
radix tree sees exactly the recorded prefix sharing:

- ``--api generate`` (SGLang's native ``/generate``): ``input_ids``; each block of a prompt becomes
  token ids drawn from a PRNG seeded by the block's chained hash, with one token count per hash
  (:class:`PromptBook`), so equal hash chains give equal token prefixes; ``max_new_tokens`` =
  recorded completion tokens, ``ignore_eos``; hints in ``sampling_params.custom_params.pbkv``.
- ``--api chat`` (OpenAI ``/v1/chat/completions``, e.g. ``pbkv-server``): one user message whose
  text is built block by block the same way (one 4-character word per recorded token); hints as
  ``X-PBKV-*`` headers and ``custom_params.pbkv``; ``max_tokens`` = recorded completion tokens.
- ``--api auto`` picks ``generate`` when ``GET /get_model_info`` answers (SGLang), else ``chat``.

Measured per request (streaming): TTFT (send -> first streamed token, seconds), latency (send ->
end), the gaps between streamed output chunks (ITL, as ``bench_serving`` measures it), prompt and
cached tokens as the server reports them. Printed: a summary table with the serving figures in
SGLang ``bench_serving``'s names (:mod:`pbkv_server.sim.serving_metrics`: TTFT, TPOT, ITL and
end-to-end latency at mean, median, p90 and p99, throughput, goodput under ``--slo-ttft`` /
``--slo-tpot``); ``--json`` writes the summary and every request.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import httpx
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pbkv_contract.files import output_problem, replace_file
from pbkv_contract.hints import BODY_KEY, END_PATH, Hints
from pbkv_contract.trace import (
    InvocationRecord,
    TraceFormatError,
    WorkflowEndRecord,
    group_workflows,
    read_trace,
)
from pbkv_server.sim.metrics import percentile
from pbkv_server.sim.simulator import MAX_CONCURRENCY
from pbkv_server.sim.report import jsonable
from pbkv_server.sim.serving_metrics import RequestTiming, Slo, serving_metrics

__all__ = ["command", "replay", "check_arguments", "detect_vocab_size", "block_token_ids", "PromptBook", "RequestResult",
           "ReplaySummary"]

console = Console()
err_console = Console(stderr=True, soft_wrap=True)  # one-line messages stay one line

#: Token ids are drawn from [TOKEN_ID_LOW, vocab_size): clear of the special tokens at the start
#: of common vocabularies.
TOKEN_ID_LOW = 1000
_WORD_ALPHABET = "abcdefghijklmnopqrstuvwxyz"


# ---------------------------------------------------------------------------- prompts


def block_token_ids(block_hash: str, n_tokens: int, vocab_size: int) -> list[int]:
    """``n_tokens`` token ids determined by one chained block hash (same hash -> same ids).

    Raises:
        ValueError: ``vocab_size`` <= :data:`TOKEN_ID_LOW`.
    """
    if vocab_size <= TOKEN_ID_LOW:
        raise ValueError(f"vocab_size must exceed {TOKEN_ID_LOW}")
    rng = random.Random(block_hash)
    return [rng.randrange(TOKEN_ID_LOW, vocab_size) for _ in range(n_tokens)]


class PromptBook:
    """Rebuilds prompts from prefix hashes with one fixed token count per block hash.

    A block's token count is taken from the first record that uses its hash (``block_tokens`` if
    recorded, else the even spread of ``prompt_tokens``) and reused for every later record, so two
    prompts that share ``n`` leading hashes share exactly the same leading tokens (or text). A
    prompt's length then matches its recorded ``prompt_tokens`` up to the spread of its blocks.
    Build prompts in trace order for a deterministic result.

    Args:
        vocab_size: token ids are drawn from ``[TOKEN_ID_LOW, vocab_size)``.
    """

    def __init__(self, vocab_size: int = 32000) -> None:
        if vocab_size <= TOKEN_ID_LOW:
            raise ValueError(f"vocab_size must exceed {TOKEN_ID_LOW}")
        self.vocab_size = vocab_size
        self.counts: dict[str, int] = {}

    def block_counts(self, rec: InvocationRecord) -> list[int]:
        """Tokens of each block of ``rec`` (fixed per hash, see the class docstring)."""
        return [self.counts.setdefault(h, n) for h, n in zip(rec.prefix_hashes, rec.tokens_per_block())]

    def token_ids(self, rec: InvocationRecord) -> list[int]:
        """The prompt as token ids (at least one)."""
        ids: list[int] = []
        for block_hash, n in zip(rec.prefix_hashes, self.block_counts(rec)):
            ids.extend(block_token_ids(block_hash, n, self.vocab_size))
        return ids or [TOKEN_ID_LOW]

    def text(self, rec: InvocationRecord) -> str:
        """The prompt as text: one pseudo-word of 4 letters and a space per token, drawn from a PRNG
        seeded by each block's hash."""
        parts: list[str] = []
        for block_hash, n in zip(rec.prefix_hashes, self.block_counts(rec)):
            rng = random.Random(block_hash)
            parts.append("".join("".join(rng.choice(_WORD_ALPHABET) for _ in range(4)) + " " for _ in range(n)))
        return "".join(parts) or "empty "


# ---------------------------------------------------------------------------- results


@dataclass(slots=True)
class RequestResult:
    """One replayed invocation. Times in seconds (wall clock of this client); tokens as reported."""

    workflow_id: str
    step: int
    agent: str
    ok: bool
    ttft_s: float | None = None
    latency_s: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    sent_s: float = 0.0  # when it was sent, seconds after the replay started
    itl_s: list[float] = field(default_factory=list)  # gaps between its streamed output chunks

    def timing(self) -> RequestTiming:
        """As a :class:`~pbkv_server.sim.serving_metrics.RequestTiming` (times from the replay's start)."""
        first = self.sent_s + (self.ttft_s if self.ttft_s is not None else self.latency_s)
        return RequestTiming(self.sent_s, first, self.sent_s + self.latency_s, self.prompt_tokens,
                             self.completion_tokens, [(g, 1) for g in self.itl_s])


@dataclass(slots=True)
class ReplaySummary:
    """Aggregates of a replay (seconds, tokens; ``hit_rate`` = cached / prompt tokens)."""

    api: str
    target: str
    concurrency: int
    workflows: int
    requests: int
    errors: int
    wall_s: float
    ttft_mean_s: float | None
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    latency_mean_s: float | None
    workflow_latency_mean_s: float | None
    prompt_tokens: int
    cached_tokens: int
    hit_rate: float
    end_signals: int = 0
    serving: dict[str, float] = field(default_factory=dict)  # bench_serving names (serving_metrics)
    results: list[RequestResult] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The summary as JSON-ready data (``results`` included)."""
        return asdict(self)


# ---------------------------------------------------------------------------- replay


def check_arguments(*, target: str, concurrency: int = 1, api: str = "auto", gap_scale: float = 0.0,
                    timeout_s: float = 600.0, max_output_tokens: int | None = None, limit: int | None = None,
                    vocab_size: int | None = None) -> None:
    """Check replay settings before any request is sent (bad ones would make every request fail).

    Args:
        target: base URL with an ``http``/``https`` scheme and a host.
        concurrency: >= 1 workflows in flight. api: ``auto`` | ``generate`` | ``chat``.
        gap_scale: >= 0 (a factor on recorded gaps). timeout_s: > 0 seconds per request.
        max_output_tokens: ``None`` or >= 1 tokens. limit: ``None`` or >= 1 workflows.
        vocab_size: ``None`` (detect) or > :data:`TOKEN_ID_LOW`.

    Raises:
        ValueError: the first bad setting, named by its CLI flag.
    """
    try:
        url = httpx.URL(target)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ValueError(f"--target {target!r} is not a URL ({exc})") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"--target {target!r} is not an http(s) URL (e.g. http://127.0.0.1:30000)")
    if concurrency < 1:
        raise ValueError(f"--concurrency must be >= 1, got {concurrency}")
    if api not in ("auto", "generate", "chat"):
        raise ValueError(f"--api must be auto, generate or chat, got {api!r}")
    if not gap_scale >= 0 or math.isinf(gap_scale):  # "not >=" also catches NaN
        raise ValueError(f"--gap-scale must be a finite number >= 0 (0 = back to back), got {gap_scale:g}")
    if not timeout_s > 0 or math.isinf(timeout_s):
        raise ValueError(f"--timeout must be a finite number of seconds > 0, got {timeout_s:g}")
    if max_output_tokens is not None and max_output_tokens < 1:
        raise ValueError(f"--max-output-tokens must be >= 1, got {max_output_tokens}")
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be >= 1 workflows, got {limit}")
    if vocab_size is not None and vocab_size <= TOKEN_ID_LOW:
        raise ValueError(f"--vocab-size must exceed {TOKEN_ID_LOW} (ids below it are left to special tokens), "
                         f"got {vocab_size}")


async def replay(records: Sequence[Any], target: str, concurrency: int, api: str = "auto",
                 vocab_size: int | None = None,
                 gap_scale: float = 0.0, model: str = "default", timeout_s: float = 600.0,
                 progress: Optional[Progress] = None, max_output_tokens: int | None = None,
                 slo: Slo | None = None) -> ReplaySummary:
    """Replay ``records`` (trace records) against ``target``; see the module docstring.

    Args:
        records: v1 trace records (invocations and workflow ends).
        target: server base URL, e.g. ``http://127.0.0.1:30000``.
        concurrency: most workflows in flight (>= 1).
        api: ``generate`` | ``chat`` | ``auto``.
        vocab_size: token ids are drawn below this (``generate`` only); ``None``: the served model's
            vocabulary (:func:`detect_vocab_size`); with ``generate`` a vocabulary that cannot be
            learned is a ``ValueError`` (no guess); ``chat`` uses 32,000 (ids only make up text).
        gap_scale: sleep ``gap_scale`` x the recorded gap between a workflow's invocations (0 = none).
        model: ``model`` field of chat requests.
        timeout_s: per-request timeout, seconds.
        max_output_tokens: cap on each request's output length (``None`` = as recorded).
        progress: optional rich progress bar (one tick per request).
        slo: goodput's objectives (``serving`` of the summary).

    Raises:
        ValueError: a bad argument (see :func:`check_arguments`) or a trace without invocations.
    """
    check_arguments(target=target, concurrency=concurrency, api=api, gap_scale=gap_scale, timeout_s=timeout_s,
                    max_output_tokens=max_output_tokens, vocab_size=vocab_size)
    workflows = group_workflows(records)
    if not workflows:
        raise ValueError("the trace holds no invocations")
    end_status = {r.workflow_id: r.status for r in records if isinstance(r, WorkflowEndRecord)}
    target = target.rstrip("/")
    limits = httpx.Limits(max_connections=concurrency * 2 + 4)
    async with httpx.AsyncClient(base_url=target, timeout=timeout_s, limits=limits) as client:
        if api == "auto":
            api = await _detect_api(client)
        if vocab_size is None and api == "generate":
            vocab_size = await detect_vocab_size(client)
            if vocab_size is None:  # a guess could send ids outside the vocabulary and crash the server
                raise ValueError(f"cannot learn the vocabulary of the model served at {target} (its /get_model_info "
                                 "model_path has no config.json readable from here); pass --vocab-size N")
        if vocab_size is None:
            vocab_size = 32000  # chat API: ids only make up the prompt text
        book = PromptBook(vocab_size)
        ids = {id(r): book.token_ids(r) for invs in workflows.values() for r in invs} if api == "generate" else {}
        texts = {id(r): book.text(r) for invs in workflows.values() for r in invs} if api == "chat" else {}
        task_id = progress.add_task("live replay", total=sum(len(v) for v in workflows.values())) if progress else None
        sem = asyncio.Semaphore(concurrency)
        results: list[RequestResult] = []
        wf_latencies: list[float] = []
        ends = 0

        async def run_workflow(wf_id: str, invocations: list[InvocationRecord]) -> None:
            nonlocal ends
            async with sem:
                start = time.perf_counter()
                prev_end: float | None = None
                for rec in invocations:
                    if gap_scale > 0 and prev_end is not None and rec.t_start > prev_end:
                        await asyncio.sleep(gap_scale * (rec.t_start - prev_end))
                    prompt = ids[id(rec)] if api == "generate" else texts[id(rec)]
                    results.append(await _send(client, api, rec, prompt, model, max_output_tokens, t0))
                    prev_end = rec.t_end
                    if progress is not None:
                        progress.advance(task_id)
                status = end_status.get(wf_id, "completed")
                try:
                    r = await client.post(END_PATH.format(workflow_id=wf_id), json={"status": status})
                    ends += r.status_code == 204
                except httpx.HTTPError:
                    pass
                wf_latencies.append(time.perf_counter() - start)

        t0 = time.perf_counter()
        await asyncio.gather(*(run_workflow(wf, invs) for wf, invs in workflows.items()))
        wall = time.perf_counter() - t0
    return _summarise(api, target, concurrency, len(workflows), results, wf_latencies, wall, ends, slo)


async def detect_vocab_size(client: httpx.AsyncClient) -> int | None:
    """The served model's vocabulary size, from ``config.json`` in the folder SGLang's
    ``/get_model_info`` names, when that folder is readable from here (a server on this machine);
    ``None`` otherwise. Token ids at or above it would fail the request."""
    try:
        info = (await client.get("/get_model_info")).json()
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(info, dict):
        return None
    for key in ("model_path", "tokenizer_path"):  # the tokenizer folder usually holds config.json too
        try:
            config = json.loads((Path(info[key]) / "config.json").read_text())
            vocab = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
            if vocab and int(vocab) > TOKEN_ID_LOW:
                return int(vocab)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return None


async def _detect_api(client: httpx.AsyncClient) -> str:
    try:
        r = await client.get("/get_model_info")
        return "generate" if r.status_code == 200 else "chat"
    except httpx.HTTPError:
        return "chat"


async def _send(client: httpx.AsyncClient, api: str, rec: InvocationRecord, prompt: Any,
                model: str, max_output_tokens: int | None = None, origin: float | None = None) -> RequestResult:
    hints = Hints(rec.workflow_id, rec.agent, rec.step, rec.app, bool(rec.internal))  # internal travels on
    out = RequestResult(rec.workflow_id, rec.step, rec.agent, ok=False)
    max_new = max(1, rec.completion_tokens)
    if max_output_tokens is not None:
        max_new = max(1, min(max_new, max_output_tokens))
    if api == "generate":
        path, headers = "/generate", {}
        body: dict[str, Any] = {
            "input_ids": prompt,
            "sampling_params": {"max_new_tokens": max_new, "ignore_eos": True, "temperature": 0.0,
                                "custom_params": {BODY_KEY: hints.to_body()}},
            "stream": True,
        }
    else:
        path, headers = "/v1/chat/completions", hints.to_headers()
        body = {"model": model, "messages": [{"role": "user", "content": prompt}],
                "max_tokens": max_new, "stream": True, "stream_options": {"include_usage": True},
                "custom_params": {BODY_KEY: hints.to_body()}}
    t0 = time.perf_counter()
    out.sent_s = t0 - (t0 if origin is None else origin)
    last = t0
    try:
        async with client.stream("POST", path, json=body, headers=headers) as resp:
            if resp.status_code != 200:
                out.error = f"HTTP {resp.status_code}: {(await resp.aread())[:200]!r}"
                out.latency_s = time.perf_counter() - t0
                return out
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    chunk = json.loads(data)
                except json.JSONDecodeError:
                    continue
                if _has_output(api, chunk):
                    now = time.perf_counter()
                    if out.ttft_s is None:
                        out.ttft_s = now - t0
                    else:  # bench_serving's ITL: the gap since the previous chunk with output
                        out.itl_s.append(now - last)
                    last = now
                _read_usage(api, chunk, out)
        out.ok = True
    except httpx.HTTPError as exc:
        out.error = f"{type(exc).__name__}: {exc}"
    out.latency_s = time.perf_counter() - t0
    return out


def _has_output(api: str, chunk: dict) -> bool:
    if api == "generate":
        meta = chunk.get("meta_info") or {}
        return bool(chunk.get("text")) or bool(chunk.get("output_ids")) or meta.get("completion_tokens", 0) > 0
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content"):
            return True
    return False


def _read_usage(api: str, chunk: dict, out: RequestResult) -> None:
    if api == "generate":
        meta = chunk.get("meta_info") or {}
        out.prompt_tokens = int(meta.get("prompt_tokens", out.prompt_tokens) or 0)
        out.cached_tokens = int(meta.get("cached_tokens", out.cached_tokens) or 0)
        out.completion_tokens = int(meta.get("completion_tokens", out.completion_tokens) or 0)
        return
    usage = chunk.get("usage")
    if usage:
        out.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        out.completion_tokens = int(usage.get("completion_tokens") or 0)
        details = usage.get("prompt_tokens_details") or {}
        out.cached_tokens = int(details.get("cached_tokens") or 0)


def _summarise(api: str, target: str, concurrency: int, n_wf: int, results: list[RequestResult],
               wf_latencies: list[float], wall: float, ends: int, slo: Slo | None = None) -> ReplaySummary:
    ok = [r for r in results if r.ok]
    ttfts = sorted(r.ttft_s for r in ok if r.ttft_s is not None)
    prompt = sum(r.prompt_tokens for r in ok)
    cached = sum(r.cached_tokens for r in ok)
    return ReplaySummary(
        api=api, target=target, concurrency=concurrency, workflows=n_wf, requests=len(results),
        errors=len(results) - len(ok), wall_s=wall,
        ttft_mean_s=statistics.fmean(ttfts) if ttfts else None,
        ttft_p50_s=_quantile(ttfts, 0.5), ttft_p90_s=_quantile(ttfts, 0.9),
        latency_mean_s=statistics.fmean(r.latency_s for r in ok) if ok else None,
        workflow_latency_mean_s=statistics.fmean(wf_latencies) if wf_latencies else None,
        prompt_tokens=prompt, cached_tokens=cached, hit_rate=cached / prompt if prompt else 0.0,
        end_signals=ends, results=results,
        # NaN (no sample) as None: --json stays strict JSON
        serving=jsonable(serving_metrics([r.timing() for r in ok if r.ttft_s is not None], slo, wf_latencies)))


def _quantile(sorted_values: list[float], q: float) -> float | None:
    """Quantile ``q`` (0-1) as the simulator computes it (:func:`pbkv_server.sim.metrics.percentile`,
    linear interpolation), so live and simulated figures compare; None if empty."""
    return percentile(sorted_values, 100 * q) if sorted_values else None


# ---------------------------------------------------------------------------- CLI


def command(
    trace: list[Path] = typer.Argument(..., help="trace file(s) (JSONL, v1)"),
    target: str = typer.Option(..., "--target", help="server base URL, e.g. http://127.0.0.1:30000"),
    concurrency: int = typer.Option(8, "--concurrency", min=1, max=MAX_CONCURRENCY, help="most workflows in flight (closed loop)"),
    api: str = typer.Option("auto", "--api", help="generate (SGLang /generate) | chat (OpenAI) | auto"),
    vocab_size: Optional[int] = typer.Option(
        None, "--vocab-size", help="token ids are drawn below this (generate; default: the served model's "
                                   "vocabulary when its config.json is readable here, else 32000)"),
    gap_scale: float = typer.Option(0.0, "--gap-scale", help="replay recorded gaps x this (0 = back to back)"),
    model: str = typer.Option("default", "--model", help="model field of chat requests"),
    limit: Optional[int] = typer.Option(None, "--limit", help="replay only the first N workflows"),
    max_output_tokens: Optional[int] = typer.Option(None, "--max-output-tokens",
                                                    help="cap each request's output length (default: as recorded)"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="write the summary and every request here"),
    timeout_s: float = typer.Option(600.0, "--timeout", help="per-request timeout, seconds"),
    slo_ttft: Optional[float] = typer.Option(None, "--slo-ttft", min=0, help="goodput's TTFT objective, ms "
                                                                            "(bench_serving --goodput ttft:MS)"),
    slo_tpot: Optional[float] = typer.Option(None, "--slo-tpot", min=0, help="goodput's TPOT objective, ms "
                                                                            "(bench_serving --goodput tpot:MS)"),
) -> None:
    """Replay a trace against a live server (SGLang or pbkv-server) and measure TTFT, latency, cached tokens."""
    try:
        slo = Slo(slo_ttft, slo_tpot)  # a bad objective: a ValueError naming its flag
        check_arguments(target=target, concurrency=concurrency, api=api, gap_scale=gap_scale, timeout_s=timeout_s,
                        max_output_tokens=max_output_tokens, limit=limit, vocab_size=vocab_size)
        # before a long replay, not after it
        if (problem := output_problem(json_out, trace, json_doc=_is_replay_summary)) is not None:
            raise ValueError(f"--json {json_out}: {problem}")
    except ValueError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=2) from None
    try:
        records = read_trace([str(p) for p in trace])
    except (OSError, TraceFormatError) as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=2) from None
    if limit is not None:
        keep = set(list(group_workflows(records))[:limit])
        records = [r for r in records if r.workflow_id in keep]
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with Progress(*columns, console=err_console, transient=True) as progress:
            summary = asyncio.run(replay(records, target, concurrency, api, vocab_size, gap_scale, model,
                                         timeout_s, progress, max_output_tokens, slo))
    except ValueError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=2) from None
    _print_summary(summary)
    if json_out is not None:
        replace_file(json_out, lambda tmp: tmp.write_text(json.dumps(summary.to_json(), indent=1)))
    if summary.errors:
        # the first failure's reason on the console (a dead target, a wrong --api, a 4xx) so the
        # user need not open --json to learn why
        first = next((r.error for r in summary.results if not r.ok and r.error), "no reason recorded")
        alike = sum(not r.ok and (r.error or "no reason recorded") == first for r in summary.results)
        what = "every request failed" if summary.errors == summary.requests else \
            f"{summary.errors} of {summary.requests} requests failed"
        err_console.print(f"[bold red]error:[/] {what}; the first: {escape(first)} "
                          f"({alike} failed the same way; --json lists them all)", highlight=False, soft_wrap=True)
        if summary.errors == summary.requests:
            raise typer.Exit(code=1)


def _print_summary(s: ReplaySummary) -> None:
    def fmt(v: float | None, scale: float = 1e3, unit: str = " ms") -> str:
        return "-" if v is None else f"{v * scale:.1f}{unit}"

    table = Table(title=f"live replay: {s.target} ({s.api}, concurrency {s.concurrency})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("workflows", str(s.workflows)), ("requests", str(s.requests)), ("errors", str(s.errors)),
        ("wall time", f"{s.wall_s:.2f} s"), ("TTFT mean", fmt(s.ttft_mean_s)), ("TTFT p50", fmt(s.ttft_p50_s)),
        ("TTFT p90", fmt(s.ttft_p90_s)), ("request latency mean", fmt(s.latency_mean_s)),
        ("workflow latency mean", fmt(s.workflow_latency_mean_s, 1.0, " s")),
        ("prompt tokens", str(s.prompt_tokens)), ("cached tokens", str(s.cached_tokens)),
        ("hit rate (cached/prompt)", f"{s.hit_rate:.3f}"), ("end signals accepted", str(s.end_signals)),
        *_serving_rows(s.serving),
    ]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)


def _serving_rows(m: dict[str, float]) -> list[tuple[str, str]]:
    """Rows of the ``bench_serving`` figures (names as in ``--json``'s ``serving``)."""
    def ms(key: str) -> str:
        v = m.get(key)
        return "-" if v is None or not math.isfinite(v) else f"{v:.1f} ms"

    rows = [(key, ms(key)) for key in ("median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms",
                                       "mean_itl_ms", "p99_itl_ms", "p99_e2e_latency_ms")]
    for key, unit in (("request_throughput", "req/s"), ("output_throughput", "tok/s"), ("request_goodput", "req/s"),
                      ("slo_attainment", "")):
        v = m.get(key)
        if v is not None:
            rows.append((key, f"{v:.3f} {unit}".rstrip() if math.isfinite(v) else "-"))
    return rows


def _is_replay_summary(document: Any) -> bool:
    """Whether a JSON document is an earlier ``--json`` result of a live replay (it may be replaced)."""
    return isinstance(document, dict) and {"api", "target", "requests", "hit_rate"} <= document.keys()
