"""pbkv-server replicas behind an SMG router on this machine (``docs/routers.md``).

:func:`local_cluster` starts N ``pbkv-server`` replicas on free loopback ports, then SMG
(``smg launch``, the Shepherd Model Gateway, formerly SGLang's model gateway; ``pip install smg``)
in front of them, waits until the router has registered every replica, and stops them all on
exit. Tests and ``benchmarks/router_live.py`` use it; ``docs/routers.md`` gives the same commands by hand.

What SMG 1.13 does with PBKV's traffic (observed against pbkv-server, ``docs/routers.md``): it routes
``/v1/chat/completions`` by policy (``consistent_hashing`` keys on ``X-SMG-Routing-Key``),
forwards the JSON body unchanged (``custom_params.pbkv`` hints arrive) but only its own request
headers (``X-PBKV-*`` hints are dropped), names the serving worker in ``x-smg-routed-worker-id``,
answers 404 to ``/pbkv/v1/...``, and retries a request whose worker refuses the connection on the
next healthy worker of the ring.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import httpx

__all__ = ["RouterUnavailable", "LocalCluster", "local_cluster", "smg_executable", "free_port"]

#: SMG's routing policies used here (``smg launch --policy``).
SMG_POLICIES = ("consistent_hashing", "cache_aware", "round_robin", "manual", "prefix_hash", "power_of_two", "random")


class RouterUnavailable(RuntimeError):
    """The SMG router is not installed or did not start; the message says why (and its log tail)."""


@dataclass
class LocalCluster:
    """A running cluster.

    Attributes:
        router_url: the router's root URL (point the app's ``base_url`` at ``router_url + "/v1"``).
        replica_urls: the replicas' root URLs, in ``--worker-urls`` order.
        traces: each replica's ``--trace-out`` file (``None`` without a trace directory).
        replicas: the replicas' processes.
        router: the router's process.
    """

    router_url: str
    replica_urls: list[str]
    traces: list[Path | None]
    replicas: list[subprocess.Popen] = field(repr=False)
    router: subprocess.Popen = field(repr=False)

    def kill_replica(self, index: int) -> None:
        """Kill replica ``index`` at once (SIGKILL: a crash, no graceful shutdown)."""
        proc = self.replicas[index]
        proc.kill()
        proc.wait(timeout=30)

    def metric(self, index: int, name: str, timeout_s: float = 10.0, **labels: str) -> float:
        """Sum of replica ``index``'s samples called ``name`` whose labels include ``labels``
        (its ``/metrics``; 0.0 if there is none).

        Raises:
            httpx.HTTPError: the replica does not answer.
        """
        from prometheus_client.parser import text_string_to_metric_families

        response = httpx.get(self.replica_urls[index] + "/metrics", timeout=timeout_s)
        response.raise_for_status()
        return sum(sample.value for family in text_string_to_metric_families(response.text)
                   for sample in family.samples
                   if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()))


def smg_executable() -> str | None:
    """Path of the ``smg`` command: next to this interpreter (a venv), else on ``PATH``; ``None`` if absent."""
    here = Path(sys.executable).with_name("smg")
    return str(here) if here.is_file() else shutil.which("smg")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it; shared by the tests,
    the benchmarks and the SGLang CPU launcher)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def local_cluster(replicas: int, *, router_policy: str = "consistent_hashing", server_flags: Sequence[str] = (),
                  router_flags: Sequence[str] = (), trace_dir: str | os.PathLike[str] | None = None,
                  env: Mapping[str, str] | None = None, log_dir: str | os.PathLike[str] | None = None,
                  ports: Sequence[int] | None = None, startup_timeout_s: float = 60.0) -> Iterator[LocalCluster]:
    """Start ``replicas`` pbkv-server replicas and an SMG router on 127.0.0.1; stop all on exit.

    Args:
        replicas: number of replicas (>= 1).
        router_policy: SMG ``--policy`` (one of :data:`SMG_POLICIES`).
        server_flags: extra ``pbkv-server`` flags for every replica (``--policy lru``, ``--scenario ...``).
        router_flags: extra ``smg launch`` flags.
        trace_dir: if set, replica i writes ``replica-i.jsonl`` there (``--trace-out``).
        env: extra environment of the replicas (e.g. ``PBKV_DATA_DIR`` for a scenario).
        log_dir: where the processes' output goes (``replica-i.log``, ``router.log``); default discarded.
        ports: the replicas' ports (default: free ones). SMG's ring hashes the worker URLs, so the
            same ports give the same workflow-to-replica map in every run.
        startup_timeout_s: longest wait for each replica's ``/health`` and for the router's registration.

    Yields:
        the :class:`LocalCluster`.

    Raises:
        RouterUnavailable: ``smg`` is not installed, exits or does not register the replicas in time.
        RuntimeError: a replica exits or does not answer in time (its log tail in the message).
        ValueError: ``replicas`` < 1, an unknown ``router_policy``, or ``ports`` not ``replicas`` long.
    """
    if replicas < 1:
        raise ValueError("replicas must be >= 1")
    if ports is not None and len(ports) != replicas:
        raise ValueError(f"{len(ports)} ports for {replicas} replicas")
    if router_policy not in SMG_POLICIES:
        raise ValueError(f"unknown SMG policy {router_policy!r}; known: {', '.join(SMG_POLICIES)}")
    smg = smg_executable()
    if smg is None:
        raise RouterUnavailable("the smg command is not installed (pip install smg)")
    logs = Path(log_dir) if log_dir is not None else None
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
    traces: list[Path | None] = [None] * replicas
    if trace_dir is not None:
        Path(trace_dir).mkdir(parents=True, exist_ok=True)
        traces = [Path(trace_dir) / f"replica-{i}.jsonl" for i in range(replicas)]
    server = str(Path(sys.executable).with_name("pbkv-server"))
    procs: list[subprocess.Popen] = []
    router: subprocess.Popen | None = None
    try:
        urls = []
        for i in range(replicas):
            port = ports[i] if ports is not None else free_port()
            cmd = [server, "--port", str(port), *server_flags]
            if traces[i] is not None:
                cmd += ["--trace-out", str(traces[i])]
            procs.append(_spawn(cmd, logs, f"replica-{i}.log", _replica_env(env)))
            urls.append(f"http://127.0.0.1:{port}")
        for i, (url, proc) in enumerate(zip(urls, procs)):
            _wait(lambda url=url: httpx.get(url + "/health", timeout=2.0).status_code == 200, proc,
                  startup_timeout_s, RuntimeError, f"replica {i} ({url})", logs, f"replica-{i}.log")
        port = free_port()
        router_url = f"http://127.0.0.1:{port}"
        # Replicas are up before the router starts, so one quick startup check registers them.
        cmd = [smg, "launch", "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *urls,
               "--policy", router_policy, "--worker-startup-check-interval", "1", "--log-level", "warn",
               "--shutdown-grace-period-secs", "2",
               *router_flags]
        router = _spawn(cmd, logs, "router.log", dict(os.environ))
        _wait(lambda: _registered(router_url) == replicas, router, startup_timeout_s, RouterUnavailable,
              f"the SMG router ({router_url})", logs, "router.log")
        yield LocalCluster(router_url, urls, traces, procs, router)
    finally:
        if router is not None:
            _stop(router, signal.SIGTERM)
        for proc in procs:
            _stop(proc, signal.SIGINT)  # uvicorn's graceful shutdown flushes the trace


def _spawn(cmd: list[str], logs: Path | None, name: str, env: Mapping[str, str]) -> subprocess.Popen:
    out = open(logs / name, "ab") if logs is not None else subprocess.DEVNULL
    try:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=dict(env), start_new_session=True)
    finally:
        if logs is not None:
            out.close()  # the child holds its own copy


def _registered(router_url: str) -> int:
    """Healthy workers the router lists (0 while it does not answer)."""
    try:
        data = httpx.get(router_url + "/workers", timeout=2.0).json()
    except (httpx.HTTPError, ValueError):
        return 0
    return sum(1 for w in data.get("workers", []) if w.get("is_healthy", True))


def _wait(ready, proc: subprocess.Popen, timeout_s: float, error: type[Exception], what: str, logs: Path | None,
          log_name: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise error(f"{what} exited with status {proc.returncode}{_tail(logs, log_name)}")
        try:
            if ready():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise error(f"{what} not ready after {timeout_s:.0f} s{_tail(logs, log_name)}")


def _tail(logs: Path | None, name: str) -> str:
    if logs is None or not (logs / name).is_file():
        return ""
    return ":\n" + (logs / name).read_text(errors="replace")[-2000:]


def _stop(proc: subprocess.Popen, sig: int) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)


def _replica_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    """This process's environment plus ``extra``, with the checkout on ``PYTHONPATH``: a scenario
    of the examples (``examples`` is not installed, it runs from the checkout) must import in the
    replicas whatever their working directory."""
    from pbkv_server.backends.engine_env import CHECKOUT_ROOT

    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHECKOUT_ROOT), env.get("PYTHONPATH", "")) if p)
    return env
