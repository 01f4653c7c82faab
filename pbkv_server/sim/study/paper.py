"""The PBKV paper's sensitivity studies on a recorded trace and its trained predictor (``pbkv-bench study``).

Studies (paper figure in brackets), each a set of replays of the test trace:

* ``concurrency`` [5a]: hit rate and latency of every sweep policy at each concurrency, and each
  policy's *admission limit*: the first concurrency at which, on average, at least one request
  waits to be admitted (:meth:`~pbkv_server.sim.metrics.MetricsCollector.mean_queue_length`
  >= 1): from there on the device cannot hold the KV of every request in flight and the added
  workflows only queue (the simulator never fails for it: a queued request waits for memory);
* ``backbone`` [5b]: each predictor backbone (GraphSAGE, MLP, Markov-3, Transformer) trained on
  the training trace, its top-1 accuracy on the test trace's workflows (mean over k = 1..K)
  against the hit rate of ``pbkv`` with it over LRU's;
* ``horizon`` [5c]: ``pbkv`` with GraphSAGE predictors trained for horizon K;
* ``gamma`` [Figure 10]: ``pbkv``'s score decay gamma (PBKV Eq. 2);
* ``rho`` [Figure 11]: the aggressive variant's displacement share rho (``pbkv`` alongside, which
  does not read rho, as the control);
* ``noise`` [Figure 12]: the oracle mixed with uniform, ``noise:LAMBDA``, for every predictive
  policy.

Seeds: a study that uses the trained predictor repeats each point with ``seeds`` predictors: the
given model file, then GraphSAGE models trained on the training trace with seeds 1, 2, ...
(:func:`pbkv_train.backbones.train_backbone`, ``pbkv-predictor train``'s recipe); backbone and
horizon models are trained for every seed. Points report mean and standard deviation over seeds
(error bars). Policies without predictions, and the noise study (the oracle is deterministic), run
once. Policy names come from the registry (predictive ones, the baseline, the default policy).

Every replay uses one setup: device KV tokens (default: the profile's GPU-memory capacity), host
tier = ``host_ratio`` x device (default ``PAPER_HOST_RATIO`` = 1, the PBKV paper's HiCache setting,
as ``pbkv-bench replay``), the base concurrency (default 72, the paper's HoVer setting) except in
the concurrency sweep.

Measures (:mod:`pbkv_server.sim.measures`): each run's speedup vs LRU and latency capture are
taken against the baseline and the offline reference (``REFERENCE_POLICY``) replayed once per
concurrency in the same setup, and prefill saved weights host hits by the profile's host value.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from pbkv_contract.trace import InvocationRecord, TraceRecord
from pbkv_server.engine.policies import (BASELINE_POLICY, DEFAULT_POLICY, REFERENCE_POLICY, REPLAY,
                                         available_policies, policy_info)
from pbkv_server.sim.measures import host_value, latency_capture, latency_speedup, prefill_saved
from pbkv_server.hardware.profiles import DEFAULT_PROFILE, MAX_HOST_RATIO, PAPER_HOST_RATIO, get_profile
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, Workload, load_workload, simulate

__all__ = ["STUDIES", "StudySettings", "Run", "Point", "StudyResult", "run_study", "aggregate", "admission_limits",
           "study_steps"]

#: Studies in report order.
STUDIES = ("concurrency", "backbone", "horizon", "gamma", "rho", "noise")
#: The paper's predictor backbones (Figure 5b), GraphSAGE first.
BACKBONES = ("graphsage", "mlp", "markov3", "transformer")
#: Mean requests waiting for admission at which a concurrency counts as past the admission limit.
QUEUE_LIMIT = 1.0
#: Most predictor seeds per point: each one trains a GraphSAGE model per run and replays every
#: trained point once more; 10 gives error bars with room to spare, and a typo such as
#: ``--seeds 100000`` is refused instead of training for days.
MAX_SEEDS = 10


@dataclass
class StudySettings:
    """What a study runs (sizes in tokens, times in seconds).

    Attributes:
        profile: hardware profile name.
        device_tokens: device KV capacity; ``None``: the profile's GPU-memory capacity.
        host_ratio: host tier / device (1 = the PBKV paper's baseline, 0 = none).
        concurrency: the base concurrency of every study but the sweep.
        concurrencies: the sweep's concurrencies (ascending).
        sweep_policies: policies of the concurrency sweep (``None``: every online replay policy).
        backbones, horizons, gammas, rhos, lambdas: the studies' x values.
        seeds: predictors per point (the given model file and seeds 1.. trained on the training trace).
        epochs: maximum training epochs of the trained backbones.
        studies: which studies run (subset of :data:`STUDIES`, report order kept).
    """

    profile: str = DEFAULT_PROFILE
    device_tokens: int | None = None
    host_ratio: float = PAPER_HOST_RATIO
    concurrency: int = 72
    concurrencies: Sequence[int] = (8, 24, 48, 72, 96, 128, 192)
    sweep_policies: Sequence[str] | None = None
    backbones: Sequence[str] = BACKBONES
    horizons: Sequence[int] = (1, 2, 3, 4, 5)
    gammas: Sequence[float] = (0.1, 0.3, 0.5, 0.7, 0.9, 1.0)
    rhos: Sequence[float] = (0.0, 0.05, 0.1, 0.2, 0.4)
    lambdas: Sequence[float] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    seeds: int = 2
    epochs: int = 60
    studies: Sequence[str] = STUDIES

    def check(self) -> None:
        """Raise ``ValueError`` naming the first bad setting (before any replay)."""
        if self.device_tokens is not None and self.device_tokens < 1:
            raise ValueError("device tokens must be >= 1")
        if not (math.isfinite(self.host_ratio) and 0 <= self.host_ratio <= MAX_HOST_RATIO):
            raise ValueError(f"host ratio must be a number from 0 to {MAX_HOST_RATIO:g}, got {self.host_ratio}")
        if self.concurrency < 1 or not self.concurrencies or min(self.concurrencies) < 1:
            raise ValueError("concurrencies must be >= 1")
        if self.seeds < 1 or self.epochs < 1:
            raise ValueError("seeds and epochs must be >= 1")
        if self.seeds > MAX_SEEDS:
            raise ValueError(f"seeds must be at most {MAX_SEEDS} (each seed trains a GraphSAGE model per run and "
                             f"replays every trained point once more), got {self.seeds}")
        if min(self.horizons, default=1) < 1:
            raise ValueError("horizons must be >= 1")
        if any(not 0 < g <= 1 for g in self.gammas):
            raise ValueError("gammas must be in (0, 1]")
        if any(not 0 <= v <= 1 for v in (*self.rhos, *self.lambdas)):
            raise ValueError("rho and lambda values must be in [0, 1]")
        if "backbone" in self.studies:  # it trains each backbone (torch): fail before any replay
            from pbkv_train.train import MODEL_NAMES

            bad = [b for b in self.backbones if b not in MODEL_NAMES]
            if bad or not self.backbones:
                raise ValueError(f"unknown backbone {bad[0] if bad else None!r}; choose from {', '.join(MODEL_NAMES)}")
        unknown = [s for s in self.studies if s not in STUDIES]
        if unknown:
            raise ValueError(f"unknown study {unknown[0]!r}; choose from {', '.join(STUDIES)}")
        known = available_policies(REPLAY)
        bad = [p for p in (self.sweep_policies or ()) if p not in known or policy_info(p).offline]
        if bad:
            raise ValueError(f"policy {bad[0]!r} cannot be swept (online replay policies: "
                             f"{', '.join(p for p in known if not policy_info(p).offline)})")


@dataclass
class Run:
    """One replay of a study: the point it belongs to and its figures.

    Attributes:
        study: a name of :data:`STUDIES`.
        policy: the replayed policy.
        x: the study's x value (concurrency, backbone name, K, gamma, rho, lambda).
        seed: the predictor's seed (``None``: no trained predictor involved).
        figures: ``hit_rate``, ``host_hit_rate``, ``mean_latency_s``, ``mean_ttft_s``,
            ``mean_queue_length``, ``hit_ratio`` (hit rate / the baseline's at the same
            concurrency), ``latency_speedup`` (the baseline's mean latency / this run's, > 1
            faster; ``latency_ratio`` is the same figure under its older name, kept for readers
            of older study JSON), ``latency_capture`` (NaN where undefined) and ``prefill_saved``
            (:mod:`pbkv_server.sim.measures`), the latency breakdown parts, and for backbones
            ``accuracy`` (mean top-1 over k) and ``accuracy_k1``.
    """

    study: str
    policy: str
    x: Any
    seed: int | None
    figures: dict[str, float]


@dataclass
class Point:
    """Runs of one (study, policy, x) aggregated: mean and standard deviation (population, over
    seeds; 0 for a single run) of every figure, and the number of runs."""

    study: str
    policy: str
    x: Any
    n: int
    mean: dict[str, float]
    std: dict[str, float]


@dataclass
class StudyResult:
    """Everything a study produced: settings, the trace's description, runs, points, notes."""

    settings: StudySettings
    trace: dict[str, Any]
    runs: list[Run] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    baselines: dict[int, dict[str, float]] = field(default_factory=dict)
    references: dict[int, dict[str, float]] = field(default_factory=dict)

    @property
    def points(self) -> list[Point]:
        """:func:`aggregate` of the runs."""
        return aggregate(self.runs)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form: settings, trace, notes, runs and points."""
        return {"settings": asdict(self.settings), "trace": self.trace, "notes": self.notes,
                "baselines": {str(c): f for c, f in self.baselines.items()},
                "references": {str(c): f for c, f in self.references.items()},
                "runs": [asdict(r) for r in self.runs], "points": [asdict(p) for p in self.points],
                "admission_limits": {p: c for p, c in admission_limits(self.points).items()}}


def aggregate(runs: Sequence[Run]) -> list[Point]:
    """Group runs by (study, policy, x) in first-seen order; mean and population std of each figure
    (both NaN for a figure that is NaN in any run of the group)."""
    groups: dict[tuple, list[Run]] = {}
    for r in runs:
        groups.setdefault((r.study, r.policy, r.x), []).append(r)
    points = []
    for (study, policy, x), rs in groups.items():
        keys = [k for k in rs[0].figures]
        mean, std = {}, {}
        for k in keys:
            values = [r.figures[k] for r in rs]
            if any(math.isnan(v) for v in values):  # an undefined figure (latency capture) stays undefined
                mean[k], std[k] = math.nan, math.nan
                continue
            mean[k] = statistics.fmean(values)
            std[k] = statistics.pstdev(values) if len(rs) > 1 else 0.0
        points.append(Point(study, policy, x, len(rs), mean, std))
    return points


def admission_limits(points: Sequence[Point]) -> dict[str, int | None]:
    """Per policy of the concurrency study: the first concurrency whose mean queue length reaches
    :data:`QUEUE_LIMIT` (``None``: not reached within the sweep)."""
    out: dict[str, int | None] = {}
    for p in sorted((p for p in points if p.study == "concurrency"), key=lambda p: p.x):
        out.setdefault(p.policy, None)
        if out[p.policy] is None and p.mean["mean_queue_length"] >= QUEUE_LIMIT:
            out[p.policy] = p.x
    return out


# --------------------------------------------------------------------------- running


class _Models:
    """The predictors of a study: the given model file (seed 0) and trained backbones, cached by
    (backbone, K, seed) so a model serves every study that needs it."""

    def __init__(self, model_path: str, train_records: Sequence[TraceRecord] | None, app: str | None, epochs: int,
                 on_train: Callable[[str], None]):
        self.model_path = model_path
        self.train_records = train_records
        self.app = app
        self.epochs = epochs
        self.on_train = on_train
        self._cache: dict[tuple[str, int, int], Any] = {}

    def backbone(self, name: str, k: int, seed: int):
        """A backbone trained on the training trace (:func:`pbkv_train.backbones.train_backbone`)."""
        key = (name, k, seed)
        if key not in self._cache:
            from pbkv_train.backbones import train_backbone

            self.on_train(f"training {name} K={k} seed {seed}")
            self._cache[key] = train_backbone(name, self.train_records, app=self.app, seed=seed, k=k,
                                              epochs=self.epochs)
        return self._cache[key]

    def predictor(self, seed: int):
        """A fresh predictor of ``seed``: the model file for seed 0, else a trained GraphSAGE."""
        if seed == 0:
            from pbkv_train.serving import load_predictor

            return load_predictor(self.model_path, app=self.app)
        from pbkv_train.data import DEFAULT_K

        return self.backbone(BACKBONES[0], DEFAULT_K, seed).predictor()


def study_steps(settings: StudySettings, seeds: int, studies: Sequence[str] | None = None) -> dict[str, int]:
    """Replays each of ``studies`` (default: the settings') will run, for progress bars, given the
    number of predictor seeds; the baseline at the base concurrency counts in the first study
    that needs it."""
    studies = [s for s in settings.studies if studies is None or s in studies]
    sweep = [p for p in (settings.sweep_policies or _online_policies()) if p != BASELINE_POLICY]
    counts = {  # the baseline and the reference (latency capture) once per concurrency
        "concurrency": len(settings.concurrencies)
        * (2 + sum(seeds if policy_info(p).predictive else 1 for p in sweep)),
        "backbone": len(settings.backbones) * seeds,
        "horizon": len(settings.horizons) * seeds,
        "gamma": len(settings.gammas) * seeds,
        "rho": len(settings.rhos) * seeds * len(_rho_policies()),
        "noise": len(settings.lambdas) * len(_predictive()),
    }
    base_done = "concurrency" in studies and settings.concurrency in settings.concurrencies
    for study in studies:
        if study != "concurrency" and not base_done:
            counts[study] += 2
            base_done = True
    return {s: counts[s] for s in studies}


def run_study(records: Sequence[TraceRecord], model_path: str, settings: StudySettings, *,
              train_records: Sequence[TraceRecord] | None = None,
              on_replay: Callable[[str], None] = lambda study: None,
              on_note: Callable[[str], None] = lambda note: None) -> StudyResult:
    """Run the chosen studies on the test trace ``records`` with the trained model ``model_path``.

    Args:
        records: the recorded test trace.
        model_path: its trained predictor (``pbkv-predictor train``), the seed-0 predictor.
        settings: what to run (:meth:`StudySettings.check` is called first).
        train_records: the training trace; without it the backbone and horizon studies are skipped
            and every point uses the model file alone (one seed), which the notes say.
        on_replay: called with the study's name after each replay (progress bars).
        on_note: called with each note as it is made (training progress, skipped studies).

    Raises:
        ValueError: a bad setting, a trace without invocations, or a model for another app.
        pbkv_server.sim.simulator.SimulationError: a request larger than the device.
    """
    settings.check()
    profile = get_profile(settings.profile)
    device = settings.device_tokens or profile.device_kv_tokens
    host = round(settings.host_ratio * device)
    workload = load_workload(records)
    apps = {r.app for r in records if isinstance(r, InvocationRecord)}
    app = next(iter(apps)) if len(apps) == 1 else None
    seeds = settings.seeds if train_records is not None else 1
    result = StudyResult(settings, {"workflows": workload.workflow_count, "invocations": workload.invocations,
                                    "app": app, "device_tokens": device, "host_tokens": host,
                                    "profile": profile.name, "seeds": seeds})

    def note(text: str) -> None:
        result.notes.append(text)
        on_note(text)

    if train_records is None:
        note("no training trace given: the backbone and horizon studies are skipped and every point uses the "
             "given model file alone (no error bars)")
    models = _Models(model_path, train_records, app, settings.epochs, on_train=on_note)
    replay = _Replayer(workload, profile, device, host, records, app, result, on_replay)
    for study in settings.studies:
        if study in ("backbone", "horizon") and train_records is None:
            continue
        _STUDY_RUNNERS[study](replay, models, settings, seeds)
    return result


class _Replayer:
    """Runs one replay and records it as a :class:`Run` of the result."""

    def __init__(self, workload: Workload, profile, device: int, host: int, records, app, result: StudyResult,
                 on_replay: Callable[[str], None]):
        self.workload, self.profile, self.device, self.host = workload, profile, device, host
        self.records, self.app, self.result, self.on_replay = records, app, result, on_replay
        self._baseline: dict[int, dict[str, float]] = {}

    def baseline(self, study: str, concurrency: int) -> dict[str, float]:
        """The baseline policy's figures at ``concurrency``, replayed once for all studies (kept in
        :attr:`StudyResult.baselines`; a run of the concurrency study, which plots it), with the
        offline reference replayed once alongside (:attr:`StudyResult.references`, the far end of
        latency capture; not a run: it needs no predictor and is no policy a server runs)."""
        if concurrency not in self._baseline:
            base = self._figures(BASELINE_POLICY, concurrency, None)
            self.on_replay(study)
            ref = self._figures(REFERENCE_POLICY, concurrency, None)
            self.on_replay(study)
            for figures in (base, ref):
                self._add_measures(figures, base, ref)
            figures = self._baseline[concurrency] = base
            figures.update(hit_ratio=1.0)
            self.result.baselines[concurrency] = figures
            self.result.references[concurrency] = ref
        if study == "concurrency":
            self.result.runs.append(Run(study, BASELINE_POLICY, concurrency, None, dict(self._baseline[concurrency])))
        return self._baseline[concurrency]

    def run(self, study: str, policy: str, x: Any, seed: int | None, *, concurrency: int, predictor=None,
            horizon: int = 3, gamma: float = 0.7, rho: float = 0.1, extra: dict[str, float] | None = None) -> None:
        """Replay ``policy`` and record the run with its ratios to the baseline at ``concurrency``."""
        base = self._baseline.get(concurrency)
        if base is None:  # the first replay at this concurrency of a study other than the sweep
            base = self.baseline(study, concurrency)
        figures = self._figures(policy, concurrency, predictor, horizon=horizon, gamma=gamma, rho=rho)
        figures.update(extra or {})
        figures["hit_ratio"] = figures["hit_rate"] / base["hit_rate"] if base["hit_rate"] > 0 else math.nan
        self._add_measures(figures, base, self.result.references[concurrency])
        self.result.runs.append(Run(study, policy, x, seed, figures))
        self.on_replay(study)

    def _add_measures(self, figures: dict[str, float], base: dict[str, float], ref: dict[str, float]) -> None:
        speedup = latency_speedup(base["mean_latency_s"], figures["mean_latency_s"])
        capture = latency_capture(figures["mean_latency_s"], base["mean_latency_s"], ref["mean_latency_s"])
        figures["latency_speedup"] = figures["latency_ratio"] = math.nan if speedup is None else speedup
        figures["latency_capture"] = math.nan if capture is None else capture
        figures["prefill_saved"] = prefill_saved(figures["hit_rate"], figures["host_hit_rate"],
                                                 host_value(self.profile))

    def _figures(self, policy: str, concurrency: int, predictor, **settings) -> dict[str, float]:
        """Figures of one replay; ``settings``: engine settings of :class:`ReplayConfig` (horizon, gamma, rho)."""
        config = ReplayConfig(policy, self.profile, device_tokens=self.device, host_tokens=self.host, **settings)
        s = simulate(self.workload, config, ReplayOptions(concurrency=concurrency, predictor=predictor)).summary
        return {"hit_rate": s["hit_rate"], "host_hit_rate": s["host_hit_rate"],
                "mean_latency_s": s["mean_latency_s"], "mean_ttft_s": s["mean_ttft_s"],
                "mean_queue_length": s["mean_queue_length"],
                **{f"breakdown_{k}": v for k, v in s["latency_breakdown_s"].items()}}


def _online_policies() -> list[str]:
    return [p for p in available_policies(REPLAY) if not policy_info(p).offline]


def _predictive() -> list[str]:
    return [p for p in available_policies(REPLAY) if policy_info(p).predictive and not policy_info(p).offline]


def _rho_policies() -> list[str]:
    """Predictive policies that prefetch (the aggressive variant reads rho; the default is the control)."""
    return [p for p in _predictive() if policy_info(p).prefetches]


def _concurrency(replay: _Replayer, models: _Models, settings: StudySettings, seeds: int) -> None:
    sweep = list(settings.sweep_policies or _online_policies())
    for c in sorted(settings.concurrencies):
        replay.baseline("concurrency", c)
        for policy in sweep:
            if policy == BASELINE_POLICY:
                continue
            if policy_info(policy).predictive:
                for seed in range(seeds):
                    replay.run("concurrency", policy, c, seed, concurrency=c, predictor=models.predictor(seed))
            else:
                replay.run("concurrency", policy, c, None, concurrency=c)


def _backbone(replay: _Replayer, models: _Models, settings: StudySettings, seeds: int) -> None:
    for name in settings.backbones:
        for seed in range(seeds):
            bb = models.backbone(name, 3, seed)
            acc = bb.accuracy(replay.records)
            finite = [a for a in acc if not math.isnan(a)]
            replay.run("backbone", DEFAULT_POLICY, name, seed, concurrency=settings.concurrency,
                       predictor=bb.predictor(),
                       extra={"accuracy": statistics.fmean(finite) if finite else math.nan,
                              "accuracy_k1": float(acc[0])})


def _horizon(replay: _Replayer, models: _Models, settings: StudySettings, seeds: int) -> None:
    for k in settings.horizons:
        for seed in range(seeds):
            bb = models.backbone(BACKBONES[0], k, seed)
            replay.run("horizon", DEFAULT_POLICY, k, seed, concurrency=settings.concurrency, predictor=bb.predictor(),
                       horizon=k)


def _gamma(replay: _Replayer, models: _Models, settings: StudySettings, seeds: int) -> None:
    _setting_sweep(replay, models, settings, seeds, "gamma", settings.gammas, [DEFAULT_POLICY])


def _rho(replay: _Replayer, models: _Models, settings: StudySettings, seeds: int) -> None:
    _setting_sweep(replay, models, settings, seeds, "rho", settings.rhos, _rho_policies())


def _setting_sweep(replay: _Replayer, models: _Models, settings: StudySettings, seeds: int, study: str,
                   values: Sequence[float], policies: Sequence[str]) -> None:
    """Replay ``policies`` with the engine setting named ``study`` at each of ``values``, per seed."""
    for value in values:
        for policy in policies:
            for seed in range(seeds):
                replay.run(study, policy, value, seed, concurrency=settings.concurrency,
                           predictor=models.predictor(seed), **{study: value})


def _noise(replay: _Replayer, models: _Models, settings: StudySettings, seeds: int) -> None:
    from pbkv_server.predictors import make_predictor

    for lam in settings.lambdas:
        for policy in _predictive():
            replay.run("noise", policy, lam, None, concurrency=settings.concurrency,
                       predictor=make_predictor(f"noise:{lam}", 3, replay.records, app=replay.app))


_STUDY_RUNNERS = {"concurrency": _concurrency, "backbone": _backbone, "horizon": _horizon, "gamma": _gamma,
                  "rho": _rho, "noise": _noise}


def load_records(path: str | Path) -> list[TraceRecord]:
    """The records of a trace file (unusable lines skipped with one warning, ``pbkv_contract.trace``)."""
    from pbkv_contract.trace import read_trace

    return read_trace(path)
