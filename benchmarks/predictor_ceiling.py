"""Bayes ceiling of next-agent prediction on a synthetic workload (`pbkv-bench synth --graph G`).

The best top-1 accuracy at k = 1..3 that ANY predictor can reach on the generator's workflows when
it knows everything the predictor's inputs can reveal: the hidden property's words in the newest
message (5 in the task, 2 in every later message, as the generator writes them; property word
sets may overlap, so a message need not name its property), the route once the first agent has
shown it (routed graphs), the step, and the signal agent's "another round follows" words when they
are the newest message. The other words of a message are drawn independently of the future and
carry nothing. Request features hash words into 64 dimensions, so a model can only see less. Each sample is
weighted as in `pbkv-predictor eval` (one per invocation, targets up to and including END).

Method (independent of the predictor code): sample N workflows from the graph's own parameters
(`pbkv_server.sim.synth.agents.GRAPHS`, re-walked here, not read from a trace), count the k-th next agent
per information state, and sum each state's largest count. With N = 300,000 the estimate moves by
less than 0.1 point between seeds. A second line gives the ceiling from agents and step alone
(what the Transformer and the Markov models can see at most).

Usage:
  .venv/bin/python benchmarks/predictor_ceiling.py [--graph supervisor] [--workflows 300000] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
from collections import Counter, defaultdict

from pbkv_server.sim.synth.agents import GRAPHS, SIGNAL_TRUTH

K = 3
#: Property words in the task message and in each later message (pbkv_server.sim.synth.agents.agent_workflow).
TASK_PROPERTY_WORDS, MESSAGE_PROPERTY_WORDS = 5, 2


def ceilings(graph: str, workflows: int, seed: int) -> dict[str, list[float]]:
    """Top-1 ceilings in percent at k = 1..K: ``{"full": [...], "agents-only": [...]}``."""
    spec = GRAPHS[graph]
    rng = random.Random(seed)
    full = [defaultdict(Counter) for _ in range(K)]
    agents_only = [defaultdict(Counter) for _ in range(K)]
    for _ in range(workflows):
        prop = rng.choices(spec.properties, weights=[p.weight for p in spec.properties])[0]
        loops = prop.min_loops
        while spec.loop and loops < spec.max_loops and rng.random() < prop.p_continue:
            loops += 1
        prologue, loop, route = spec.prologue, spec.loop, None
        if spec.routes:
            chosen = rng.choices(spec.routes, weights=prop.route_weights or None)[0]
            prologue, loop, route = chosen.prologue, chosen.loop, chosen.name
        seq = list(prologue) + list(loop) * (loops if loop else 0)
        rounds = [0] * len(prologue) + [r + 1 for r in range(loops if loop else 0) for _ in loop]
        signal = None  # the signal agent's last message: True = "another round follows"
        for s, agent in enumerate(seq):
            shown_route = route if s >= 1 else None
            newest_signal = signal if s > 0 and seq[s - 1] == spec.signal_agent else None
            n_words = TASK_PROPERTY_WORDS if s == 0 else MESSAGE_PROPERTY_WORDS
            words = tuple(sorted(set(rng.choice(prop.words) for _ in range(n_words))))
            state = (words, shown_route, s, newest_signal)
            for k in range(K):
                t = s + 1 + k
                if t > len(seq):
                    break  # past END: masked in training and evaluation
                target = seq[t] if t < len(seq) else "<END>"
                full[k][state][target] += 1
                agents_only[k][(shown_route, s)][target] += 1
            if agent == spec.signal_agent:
                more = rounds[s] < loops
                signal = more if rng.random() < SIGNAL_TRUTH else not more
    out = {}
    for name, table in (("full", full), ("agents-only", agents_only)):
        out[name] = [
            100.0 * sum(max(c.values()) for c in table[k].values()) / sum(sum(c.values()) for c in table[k].values())
            for k in range(K)
        ]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", default="supervisor", choices=sorted(GRAPHS))
    ap.add_argument("--workflows", type=int, default=300_000, help="sampled workflows")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.workflows < 1:
        ap.error("--workflows must be >= 1")
    result = ceilings(args.graph, args.workflows, args.seed)
    print(f"Bayes ceiling, top-1 % at k = 1..{K}, graph {args.graph}, {args.workflows} sampled workflows")
    for name, accs in result.items():
        print(f"  {name:12s} " + " / ".join(f"{a:.1f}" for a in accs))


if __name__ == "__main__":
    main()
