"""Per-app predictor routing for ``pbkv-server --predictor APP=SPEC`` (repeatable).

The engine takes one :class:`pbkv_contract.prediction.Predictor`; a server may hold a trained model per app
plus an online Markov model for the rest. :class:`AppRoutedPredictor` is that one predictor: it
splits each batch of queries by app, asks the app's predictor, and returns the predictions in the
original order.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from pbkv_contract.prediction import Prediction, PredictionQuery, Predictor

__all__ = ["AppRoutedPredictor", "parse_predictor_flags", "build_predictor"]

#: Key of the predictor used for apps without their own entry.
ANY_APP = "*"


class AppRoutedPredictor(Predictor):
    """Dispatch queries to a predictor per app, ``"*"`` (or ``fallback``) for the others.

    Args:
        by_app: app name -> predictor; the key ``"*"`` is the fallback.
        horizon: K of every prediction (all predictors must share it).

    Raises:
        ValueError: ``by_app`` is empty.
    """

    def __init__(self, by_app: Mapping[str, Predictor], horizon: int):
        if not by_app:
            raise ValueError("AppRoutedPredictor needs at least one predictor")
        self.by_app = dict(by_app)
        self.horizon = horizon

    @property
    def learns_online(self) -> bool:  # type: ignore[override]
        """True if any of the app predictors learns online."""
        return any(p.learns_online for p in self.by_app.values())

    def _for(self, app: str | None) -> Predictor | None:
        found = self.by_app.get(app) if app is not None else None
        return found if found is not None else self.by_app.get(ANY_APP)

    def predict(self, queries: Sequence[PredictionQuery]) -> list[Prediction]:
        """One prediction per query; apps with no predictor get K empty distributions."""
        out: list[Prediction | None] = [None] * len(queries)
        groups: dict[int, tuple[Predictor, list[int]]] = {}
        for i, q in enumerate(queries):
            pred = self._for(q.app)
            if pred is None:
                out[i] = Prediction([{} for _ in range(self.horizon)])
            else:
                groups.setdefault(id(pred), (pred, []))[1].append(i)
        for pred, idx in groups.values():
            for i, p in zip(idx, pred.predict([queries[i] for i in idx])):
                out[i] = p
        return [p if p is not None else Prediction([{} for _ in range(self.horizon)]) for p in out]

    def observe(self, query: PredictionQuery) -> None:
        """Forward to the app's predictor (online learners)."""
        pred = self._for(query.app)
        if pred is not None:
            pred.observe(query)

    def workflow_ended(self, app: str | None, workflow_id: str, status: str = "completed") -> None:
        """Forward to the app's predictor."""
        pred = self._for(app)
        if pred is not None:
            pred.workflow_ended(app, workflow_id, status)


def parse_predictor_flags(flags: Sequence[str]) -> dict[str, str]:
    """Turn ``--predictor`` values into ``{app: spec}``.

    ``APP=SPEC`` binds one app; a bare ``SPEC`` (e.g. ``markov``) binds every other app (``"*"``).

    Raises:
        ValueError: an empty app or spec, or the same app given twice.
    """
    out: dict[str, str] = {}
    for flag in flags:
        app, sep, spec = flag.partition("=")
        if not sep:
            app, spec = ANY_APP, flag
        app, spec = app.strip(), spec.strip()
        if not app or not spec:
            raise ValueError(f"--predictor expects APP=SPEC or SPEC, got {flag!r}")
        if app in out:
            raise ValueError(f"--predictor given twice for app {app!r}")
        out[app] = spec
    return out


def build_predictor(specs: Mapping[str, str], horizon: int) -> Predictor | None:
    """Build the engine's predictor from ``{app: spec}``; ``None`` when ``specs`` is empty.

    Specs are those of :func:`pbkv_server.predictors.make_predictor` that work live (``context``,
    ``markov``, ``uniform``, a model PATH); ``oracle``/``noise`` read a trace's future and are
    refused as replay-only. A model file bound to an app (``APP=PATH``) must have been trained
    for that app; one bound to ``"*"`` may belong to any app.

    Raises:
        ValueError: a spec is unknown or needs a trace, a model file is missing ("file not
            found"), unreadable, or trained for another app; the message starts with the flag
            (``--predictor APP=SPEC``).
    """
    if not specs:
        return None
    from pbkv_server.predictors import make_predictor

    built: dict[str, Predictor] = {}
    cache: dict[tuple[str, str | None], Predictor] = {}
    for app, spec in specs.items():
        own_app = None if app == ANY_APP else app
        # Apps naming the same online spec share one model: it learns every app's transitions
        # under their own app keys, so sharing loses nothing and saves memory. A model file is
        # loaded per app, because each load checks the file's app against the one it serves.
        key = (spec, None) if spec.strip() in _SHARED_SPECS else (spec, own_app)
        if key not in cache:
            try:
                cache[key] = make_predictor(spec, horizon, app=own_app, live=True)
            except ValueError as exc:
                flag = spec if own_app is None else f"{app}={spec}"
                raise ValueError(f"--predictor {flag}: {exc}") from None
        built[app] = cache[key]
    if list(built) == [ANY_APP]:
        return built[ANY_APP]
    return AppRoutedPredictor(built, horizon)


#: Online specs whose one instance can serve many apps (they key what they learn by app).
_SHARED_SPECS = frozenset({"markov", "context", "uniform"})
