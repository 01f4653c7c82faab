"""``pbkv-bench probe-profile``: send controlled probes to an idle SGLang server and fit its cost model.

Item 4 of issue 34: a profile for ``live-compare`` from probes in which one thing varies at a
time, not from the replay it is compared with (:mod:`pbkv_server.loadgen.probe_fit` says what is
fitted and why). Probes, all through SGLang's ``/generate`` with token ids
(:func:`pbkv_server.loadgen.live_replay._send`, streamed, so TTFT and the gaps between tokens
are measured as ``live-replay`` measures them):

* warm-up: ``--warmup`` passes of cold, cached and mixed probes over every size, discarded: on the CPU
  engine the first requests of each size ran 2-3x slower than later ones (e.g. 260 and 213 ms
  against 130 ms for 2,048 tokens), and a median of three repeats that holds two of them
  is a warm-up time, not a cost;
* cold: a prompt of ``n`` fresh tokens (ids no other probe uses), one output token, for each
  size of ``--sizes``, ``--repeats`` times (repeat by repeat over all sizes, so a slow stretch
  of the machine hits every size alike); the median TTFT;
* cached: the same prompt again at once (the server reports its cached tokens); the median;
* mixed (held out of the fit, :mod:`.probe_fit`): a prompt of ``c`` fresh tokens, then the same
  ``c`` followed by ``k`` fresh ones, for each ``(c, k)`` of ``--mixed``; the median TTFT of the
  second;
* decode: ``b`` requests of ``C`` fresh prompt tokens sent together, ``--decode-tokens`` output
  tokens each, for each ``b`` of ``--batches`` and ``C`` of ``--contexts``; the median gap
  between output tokens over the second half of each request's output (by then every request
  of the batch has finished its prefill, so a gap is one decode step of the whole batch).

The cache is flushed (``POST /flush_cache``) before and after, so the probes neither hit what
was there nor leave anything behind. The server must be idle: probes are timed by wall clock.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
from pathlib import Path
from typing import Any, Sequence

import httpx
import typer

from pbkv_contract.files import output_problem, replace_file
from pbkv_contract.trace import InvocationRecord
from pbkv_server.loadgen.live_replay import TOKEN_ID_LOW, _send, detect_vocab_size
from pbkv_server.loadgen.probe_fit import DecodeProbe, PrefillProbe, fit_probes

__all__ = ["fresh_ids", "decode_gaps", "run_probes", "command"]


def fresh_ids(tag: str, n: int, vocab_size: int) -> list[int]:
    """``n`` token ids drawn from a PRNG seeded by ``tag``: distinct tags give prompts that share
    no first token with each other (so no prefix hit), the same tag the same prompt."""
    rng = random.Random(f"probe/{tag}")
    return [rng.randrange(TOKEN_ID_LOW, vocab_size) for _ in range(max(1, n))]


def decode_gaps(itl_s: Sequence[float]) -> list[float]:
    """The gaps of the second half of one request's output (see the module docstring)."""
    return list(itl_s[len(itl_s) // 2:])


def _record(tag: str, prompt_tokens: int, output_tokens: int) -> InvocationRecord:
    return InvocationRecord(app="probe", workflow_id=f"probe-{tag}", step=0, agent="probe", t_start=0.0, t_end=0.0,
                            prompt_tokens=prompt_tokens, completion_tokens=output_tokens, prefix_hashes=[tag])


#: ``(cached, new)`` token counts of the mixed probes.
MIXED = ((512, 64), (512, 512), (1536, 64), (1536, 512))


async def run_probes(target: str, sizes: Sequence[int], repeats: int, batches: Sequence[int],
                     contexts: Sequence[int], decode_tokens: int, vocab_size: int | None = None,
                     warmup: int = 2, mixed: Sequence[tuple[int, int]] = MIXED,
                     ) -> tuple[list[PrefillProbe], list[DecodeProbe]]:
    """Send the probes to ``target`` (module docstring); their medians as fit inputs.

    Raises:
        ValueError: an argument out of range, or a probe that failed (its error in the message).
    """
    if repeats < 1 or warmup < 0 or decode_tokens < 4 or min([*sizes, *batches, *contexts], default=0) < 1:
        raise ValueError("sizes, batches and contexts must be >= 1, repeats >= 1, warm-up >= 0, decode tokens >= 4")
    if any(c < 1 or k < 1 for c, k in mixed):
        raise ValueError("mixed probes need >= 1 cached and >= 1 new token")
    async with httpx.AsyncClient(base_url=target.rstrip("/"), timeout=600.0) as client:
        if vocab_size is None:
            vocab_size = await detect_vocab_size(client)
            if vocab_size is None:
                raise ValueError(f"cannot learn the vocabulary of the model served at {target}; pass --vocab-size N")
        await client.post("/flush_cache")

        async def one(tag: str, n: int, out: int, ids: list[int] | None = None):
            ids = fresh_ids(tag, n, vocab_size) if ids is None else ids
            res = await _send(client, "generate", _record(tag, len(ids), out), ids, "default")
            if not res.ok or res.ttft_s is None:
                raise ValueError(f"probe {tag} failed: {res.error or 'no token'}")
            return res

        for w in range(warmup):
            for n in sizes:
                await one(f"warm-{n}-{w}", n, 1)
                await one(f"warm-{n}-{w}", n, 1)
            for c, k in mixed:
                ids = fresh_ids(f"warm-mixed-{c}-{k}-{w}", c + k, vocab_size)
                await one(f"warm-mixed-{c}-{k}-{w}", c, 1, ids[:c])
                await one(f"warm-mixed-{c}-{k}-{w}", c + k, 1, ids)
        cold = {n: [] for n in sizes}
        cached = {n: [] for n in sizes}
        hit = {n: [] for n in sizes}
        for r in range(repeats):
            for n in sizes:
                cold[n].append((await one(f"cold-{n}-{r}", n, 1)).ttft_s)
                again = await one(f"cold-{n}-{r}", n, 1)
                cached[n].append(again.ttft_s)
                hit[n].append(again.cached_tokens)
        prefill: list[PrefillProbe] = []
        for n in sizes:
            prefill.append(PrefillProbe(n, 0, statistics.median(cold[n])))
            c = int(statistics.median(hit[n]))
            if c > 0:
                prefill.append(PrefillProbe(n - c, c, statistics.median(cached[n])))
        for c, k in mixed:
            times, hits = [], []
            for r in range(repeats):
                ids = fresh_ids(f"mixed-{c}-{k}-{r}", c + k, vocab_size)
                await one(f"mixed-{c}-{k}-{r}", c, 1, ids[:c])
                res = await one(f"mixed-{c}-{k}-{r}", c + k, 1, ids)
                times.append(res.ttft_s)
                hits.append(res.cached_tokens)
            h = int(statistics.median(hits))
            prefill.append(PrefillProbe(c + k - h, h, statistics.median(times), held_out=True))
        decode: list[DecodeProbe] = []
        for b in batches:
            for ctx in contexts:
                results = await asyncio.gather(*(one(f"dec-{b}-{ctx}-{i}", ctx, decode_tokens) for i in range(b)))
                gaps = [g for res in results for g in decode_gaps(res.itl_s)]
                if gaps:
                    decode.append(DecodeProbe(b, b * (ctx + decode_tokens * 3 // 4), statistics.median(gaps)))
        await client.post("/flush_cache")
    return prefill, decode


def _ints(text: str, name: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter(f"{name}: comma-separated whole numbers, got {text!r}") from None
    if not values or min(values) < 1:
        raise typer.BadParameter(f"{name}: numbers >= 1, got {text!r}")
    return values


def _pairs(text: str) -> list[tuple[int, int]]:
    """``--mixed``: ``C+K`` pairs, comma-separated."""
    try:
        pairs = [tuple(int(x) for x in v.split("+")) for v in text.split(",") if v.strip()]
    except ValueError:
        pairs = [()]
    if any(len(p) != 2 or min(p) < 1 for p in pairs):
        raise typer.BadParameter(f"--mixed: CACHED+NEW pairs of numbers >= 1, comma-separated, got {text!r}")
    return pairs  # type: ignore[return-value]


def command(
    target: str = typer.Option(..., "--target", help="SGLang server URL (idle: probes are timed by wall clock)"),
    sizes: str = typer.Option("64,256,512,1024,2048", "--sizes", help="cold and cached prompt sizes, tokens"),
    repeats: int = typer.Option(3, "--repeats", min=1, help="repeats per size (the median is kept)"),
    warmup: int = typer.Option(2, "--warmup", min=0, help="discarded warm-up passes over the sizes first"),
    mixed: str = typer.Option(",".join(f"{c}+{k}" for c, k in MIXED), "--mixed",
                              help="held-out mixed probes, CACHED+NEW tokens each, comma-separated ('' = none)"),
    batches: str = typer.Option("1,4", "--batches", help="decode batch sizes"),
    contexts: str = typer.Option("64,512", "--contexts", help="prompt tokens per decoding request"),
    decode_tokens: int = typer.Option(16, "--decode-tokens", min=4, help="output tokens per decode probe"),
    device_tokens: int = typer.Option(10000, "--device-tokens", min=1, help="KV pool of the profile written"),
    vocab_size: int = typer.Option(None, "--vocab-size", help="token ids below this (default: the model's)"),
    json_out: Path = typer.Option(None, "--json", help="write the probes, the fit and the profile here"),
) -> None:
    """Probe an idle SGLang server (cold and cached single requests, decode steps) and fit its cost model."""
    # before minutes of probing, not after them; errors read as every pbkv-bench command's ("error: ...")
    if (problem := output_problem(json_out, json_doc=_is_probe_result)) is not None:
        typer.echo(f"error: --json {json_out}: {problem}", err=True)
        raise typer.Exit(2)
    try:
        prefill, decode = asyncio.run(run_probes(target, _ints(sizes, "--sizes"), repeats, _ints(batches, "--batches"),
                                                 _ints(contexts, "--contexts"), decode_tokens, vocab_size, warmup,
                                                 _pairs(mixed)))
        fit = fit_probes(prefill, decode)
    except (ValueError, httpx.HTTPError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    for p in prefill:
        typer.echo(f"prefill  new {p.new_tokens:>6}  cached {p.cached_tokens:>6}  {1e3 * p.seconds:9.2f} ms  fit "
                   f"{1e3 * fit.predict(p.new_tokens, p.cached_tokens):9.2f} ms{'  (held out)' if p.held_out else ''}")
    for d in decode:
        typer.echo(f"decode   batch {d.batch:>3}  context {d.context_tokens:>7}  {1e3 * d.seconds:9.2f} ms/step")
    typer.echo(f"fit: fixed {1e3 * fit.fixed_s:.2f} ms, {fit.prefill_tokens_per_s:,.0f} tok/s, attention "
               f"{fit.attn_pair_s:.3g} s/pair (worst cold error {fit.cold_rel_err:.1%}); a cached token "
               f"{1e6 * fit.cached_token_s:.2f} us + {fit.cached_pair_s:.3g} s per cached pair (worst cached error "
               f"{fit.cached_rel_err:.1%}, held-out mixed {fit.held_out_rel_err:.1%}); decode {1e3 * fit.decode_base_s:.2f} "
               f"ms + {1e3 * fit.decode_per_seq_s:.3f} ms/seq + {1e6 * fit.decode_per_token_s:.3f} us/token; a cached "
               f"prompt still costs {', '.join(f'{s:.0%}' for s in fit.cached_share) or '-'} of a cold one (raw TTFT "
               f"ratios {', '.join(f'{r:.2f}' for r in fit.cached_ratio) or '-'})")
    if json_out is not None:
        text = json.dumps({"target": target, "prefill": [vars(p) for p in prefill], "decode": [vars(d) for d in decode],
                           "fit": vars(fit), "device_tokens": device_tokens}, indent=1)
        replace_file(json_out, lambda tmp: tmp.write_text(text))


def _is_probe_result(document: Any) -> bool:
    """Whether a JSON document is an earlier ``probe-profile --json`` result (it may be replaced)."""
    return isinstance(document, dict) and {"target", "prefill", "decode", "fit"} <= document.keys()
