"""The guard's ghost (``ShadowLRU``, which keeps its orders as runs of units) against the per-key
model it stands for, written plainly below: random admit / pin / unpin / shrink sequences over
chained and non-chained keys, with and without a host tier, compared after every step; and the
steps where chained keys alone would mislead the index of runs' first keys."""

from __future__ import annotations

from collections import OrderedDict

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pbkv_server.engine.ghost import ShadowLRU, _agree, _first_reaching, _span, _sum
from pbkv_server.engine.pages import block_size


class KeyModel:
    """Two-tier LRU of unit keys, one ordered dict entry per key (the ghost's definition)."""

    def __init__(self, capacity: int, host_capacity: int) -> None:
        self.host_capacity = max(0, host_capacity)
        self.used = self.host_used = self.hit_tokens = self.host_hit_tokens = 0
        self.units = OrderedDict()  # device: key -> tokens, least recent first
        self.host = OrderedDict()  # host tier, likewise
        self.pins = {}  # key -> running requests holding it
        self.parked = {}  # pinned device units eviction passed over: key -> tokens

    def pin(self, keys):
        for key in keys:
            self.pins[key] = self.pins.get(key, 0) + 1

    def unpin(self, keys):
        for key in keys:
            c = self.pins.get(key, 0) - 1
            if c > 0:
                self.pins[key] = c
                continue
            self.pins.pop(key, None)
            if key in self.parked:  # back as the least recent device unit
                self.units[key] = self.parked.pop(key)
                self.units.move_to_end(key, last=False)

    def admit_tiers(self, keys, toks, room, count=True):
        units, host = self.units, self.host
        for key in keys:  # a parked unit used again is a device unit
            if key in self.parked:
                units[key] = self.parked.pop(key)
        n = 0
        while n < len(keys) and keys[n] in units:
            n += 1
        hit = sum(toks[:n])
        host_hit = 0
        if host and n < len(keys):
            m = n
            while m < len(keys) and (keys[m] in host or keys[m] in units):
                m += 1
            for key in keys[n:m]:
                if key in host:
                    tok = host.pop(key)
                    host_hit += tok
                    units[key] = tok
                    self.used += tok
                else:
                    hit += units[key]
            n = m
        if n < len(keys):
            before = len(units)
            for key, tok in zip(reversed(keys[n:]), reversed(toks[n:])):
                units[key] = tok
            if len(units) - before == len(keys) - n:
                self.used += sum(toks[n:])
            else:
                self.used = sum(units.values())
        for key in reversed(keys[:n]):
            units.move_to_end(key)
        self.evict(room, len(keys), host_hit)
        self.host_used -= host_hit
        if count:
            self.hit_tokens += hit
            self.host_hit_tokens += host_hit
        return hit, host_hit

    def shrink(self, room):
        self.evict(room, 0, 0)

    def evict(self, room, keep, loading):
        while self.used > room and len(self.units) > keep:
            key, tok = self.units.popitem(last=False)
            if key in self.pins:
                self.parked[key] = tok
                continue
            self.used -= tok
            if tok <= self.host_capacity - loading:
                self.host[key] = tok
                self.host_used += tok
                while self.host_used > self.host_capacity:
                    self.host_used -= self.host.popitem(last=False)[1]


def _blocks(data):
    """Token counts of a prompt's units: blocks of one size (small ints and others), a last block
    of any size, sometimes one more block of another size anywhere, or any counts."""
    if data.draw(st.booleans()):
        return data.draw(st.lists(st.integers(-3, 600), min_size=1, max_size=8))
    size = data.draw(st.sampled_from([0, 1, 64, 256, 257, 4096]))
    toks = [int(str(size)) for _ in range(data.draw(st.integers(0, 6)))]  # equal ints, not one object
    toks.append(data.draw(st.sampled_from([size, size - 1, size + 1, 0, 1, 5000])))
    if data.draw(st.booleans()):
        toks.insert(data.draw(st.integers(0, len(toks))), data.draw(st.integers(-1, 5000)))
    return toks


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_sums_of_blocks_of_one_size_are_products(data):
    """Where one count finds the units but the last of one size, the sums, least and most of
    any of them are what scans give; and it finds them exactly then."""
    toks = _blocks(data)
    unit = block_size(toks)
    assert (unit is not None) == (len(set(toks[:-1])) <= 1)
    assert unit is None or unit == toks[0]
    start = data.draw(st.integers(0, len(toks)))
    stop = data.draw(st.integers(start, len(toks)))
    for u in (unit, None):
        assert _sum(toks, start, stop, u) == sum(toks[start:stop])
        if start < len(toks):
            tail = toks[start:]
            got = _span(toks, start, u)
            assert got == (sum(tail), min(tail), max(tail)) and all(type(v) is int for v in got)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_first_reaching_counts_units_from_the_end(data):
    """The guessed count of units (from the end) that first reach a need, and their tokens, are
    what adding units one at a time gives."""
    toks = _blocks(data)
    toks = [max(t, 0) for t in toks]
    need = data.draw(st.integers(1, sum(toks) + 2))
    held, k = 0, 0
    while k < len(toks) and held < need:
        k += 1
        held += toks[-k]
    want = (k, held) if held >= need else (len(toks) + 1, sum(toks))
    assert _first_reaching(toks, need, sum(toks)) == want


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_agree_finds_the_first_pair_that_differs(data):
    """The pairs of two stretches equal before the first that differs, as a plain scan counts
    them: stretches that part near the end (chained keys, the common case), anywhere, or more than
    once (keys that are not chained: an equal pair after one that differs)."""
    n = data.draw(st.integers(1, 70))
    rkeys = list(range(1000, 1000 + data.draw(st.integers(n, n + 5))))
    pos = data.draw(st.integers(0, len(rkeys) - n))
    keys = list(range(data.draw(st.integers(0, 4)))) + rkeys[pos:pos + n]
    keys += list(range(2000, 2000 + data.draw(st.integers(0, 3))))
    i = keys.index(rkeys[pos])
    for at in data.draw(st.lists(st.integers(1, max(1, n - 1)), max_size=3)):
        if at < n:
            keys[i + at] = -at  # a key the run does not hold
    if data.draw(st.booleans()) and n > 1:  # a chain's way: from the first that differs, all do
        cut = data.draw(st.integers(max(1, n - 9), n - 1))
        keys[i + cut:i + n] = [-k for k in range(cut, n)]
    want = 0
    while want < n and keys[i + want] == rkeys[pos + want]:
        want += 1
    assert _agree(keys, i, rkeys, pos, n) == want


def _chained(data, prompts):
    """A prompt of chained keys (a key is the tuple of its prefix's blocks): an earlier prompt's
    prefix, extended; a key's tokens are a function of the key."""
    base = data.draw(st.sampled_from(prompts)) if prompts and data.draw(st.booleans()) else []
    path = list(base[-1]) if base else []
    path = path[:data.draw(st.integers(0, len(path)))]
    path += data.draw(st.lists(st.integers(0, 2), max_size=6))
    keys = [tuple(path[:d + 1]) for d in range(len(path))]
    return keys, [hash(k) % 4 for k in keys]  # 0 tokens too (a unit has 1 or more in the engine)


def _loose(data, prompts):
    """A prompt of keys that are not chained: repeats, any order, tokens per use (0 included)."""
    if prompts and data.draw(st.booleans()):
        keys = list(data.draw(st.sampled_from(prompts)))
        keys = keys[:data.draw(st.integers(0, len(keys)))] + data.draw(st.lists(st.integers(0, 9), max_size=3))
    else:
        keys = data.draw(st.lists(st.integers(0, 9), max_size=7))
    return keys, data.draw(st.lists(st.integers(0, 3), min_size=len(keys), max_size=len(keys)))


def _shifted(data, prompts):
    """Chained blocks of which each prompt leaves some out (as a replay leaves out a 0-token
    block): a key may come after another key, or at another depth, than it did before."""
    keys, toks = _chained(data, prompts)
    keep = data.draw(st.lists(st.integers(0, 3), min_size=len(keys), max_size=len(keys)))
    return [k for k, c in zip(keys, keep) if c], [t for t, c in zip(toks, keep) if c]


def _mode(ghost: ShadowLRU) -> str:
    return "first keys" if ghost._chain else "every key" if ghost._fast else "per-key model"


def test_units_dropped_from_the_host_come_back_as_runs():
    """A chained replay whose host drops units: the keys a prompt brings back after LRU dropped
    them are found as gone runs (no key is added to the set of keys met twice), and forgetting
    gone runs leaves the results the same."""
    runs = []
    for floor in (1 << 20, 5):
        ghost, model = ShadowLRU(12, 6), KeyModel(12, 6)
        ghost._gone_cap = ghost._gone_floor = floor
        for t in range(120):
            conv = t % 5
            keys = [(conv,) + tuple(range(d + 1)) for d in range(4 + t // 5 % 6)]
            toks = [1 + d % 3 for d in range(len(keys))]
            assert ghost.admit_tiers(keys, toks, 12) == model.admit_tiers(keys, toks, 12)
            _same(ghost, model)
        assert ghost._chain
        distinct = {k for c in range(5) for k in [(c,) + tuple(range(d + 1)) for d in range(9)]}
        runs.append((ghost._seen, ghost._gone))
    (seen, gone), (seen_small, gone_small) = runs
    assert seen == distinct and gone > 0  # every key met, once; some held by no tier
    assert len(seen_small) < len(distinct) and gone_small <= 2 * len(seen_small) + 9


def _any(data, make, prompts):
    """Keys to pin or unpin out of turn: a new prompt, or any slice of an earlier one, mostly
    of the last (still on the device: a slice splits its run, in the middle too)."""
    choice = data.draw(st.integers(0, 3)) if prompts else 3
    if choice < 3:
        keys = prompts[-1] if choice < 2 else data.draw(st.sampled_from(prompts))
        start = data.draw(st.integers(0, len(keys)))
        return keys[start:data.draw(st.integers(start, len(keys)))]
    return make(data, prompts)[0]


def _same(ghost: ShadowLRU, model: KeyModel) -> None:
    assert (ghost.used, ghost.host_used, ghost.hit_tokens, ghost.host_hit_tokens) == \
        (model.used, model.host_used, model.hit_tokens, model.host_hit_tokens)
    units, host, parked, pins = ghost._state()
    assert list(units.items()) == list(model.units.items())
    assert list(host.items()) == list(model.host.items())
    assert parked == model.parked and pins == model.pins
    assert len(ghost) == len(model.units) + len(model.parked)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), kind=st.sampled_from(["chained", "chained", "shifted", "loose"]), guard_like=st.booleans(),
       capacity=st.integers(1, 24),
       host=st.sampled_from([0, 0, 1, 4, 12, 30]))
def test_ghost_runs_equal_the_per_key_model(data, kind, guard_like, capacity, host):
    """Every return, every counter and the whole state (both orders, parked units, pins) equal the
    model's after every step. ``guard_like``: pins as the guard makes them (an admitted prompt is
    pinned at once and unpinned once later); otherwise any prompt is pinned or unpinned any time."""
    ghost, model = ShadowLRU(capacity, host), KeyModel(capacity, host)
    # gone runs forgotten at once, after a few keys, or (a replay) kept
    ghost._gone_cap = ghost._gone_floor = data.draw(st.sampled_from([0, 3, 1 << 20]))
    make = {"chained": _chained, "shifted": _shifted, "loose": _loose}[kind]
    prompts, running = [], []
    for _ in range(data.draw(st.integers(1, 40))):
        op = data.draw(st.sampled_from(["admit", "admit", "admit", "unpin", "shrink"]
                                       + ([] if guard_like else ["pin", "pin"])))
        room = capacity - data.draw(st.integers(0, capacity))
        if op == "admit":
            keys, toks = make(data, prompts)
            count = data.draw(st.booleans())
            # guard-like: the prompt's request runs; pinned by the admission (as the guard does),
            # or by a pin after it
            pin = guard_like and data.draw(st.sampled_from([None, "admit", "after"]))
            assert ghost.admit_tiers(list(keys), list(toks), room, count, pin=pin == "admit") == \
                model.admit_tiers(keys, toks, room, count)
            prompts.append(keys)
            if pin:
                if pin == "after":
                    ghost.pin(list(keys))
                model.pin(keys)
                running.append(keys)
        elif op == "pin":
            keys = _any(data, make, prompts)
            ghost.pin(list(keys))
            model.pin(keys)
        elif op == "unpin":
            if guard_like:
                if not running:
                    continue
                keys = running.pop(data.draw(st.integers(0, len(running) - 1)))
            else:
                keys = _any(data, make, prompts)
            ghost.unpin(list(keys))
            model.unpin(keys)
        else:
            ghost.shrink(room)
            model.shrink(room)
        _same(ghost, model)
    event(f"{kind} keys, runs found at the end by: {_mode(ghost)}")


def test_a_guard_like_chained_replay_keeps_its_runs():
    """Chained keys, pins as the guard makes them, a host tier: the ghost never needs the per-key
    model (so the property test above checks the runs, not the model against itself)."""
    ghost, model = ShadowLRU(40, 60), KeyModel(40, 60)
    running = []
    for t in range(300):
        conv = t % 7
        keys = [(conv,) + tuple(range(d + 1)) for d in range(3 + t // 7 % 9)]  # a conversation grows
        toks = [1 + d % 4 for d in range(len(keys))]
        room = 40 - (t * 5) % 13
        assert ghost.admit_tiers(keys, toks, room, pin=True) == model.admit_tiers(keys, toks, room)
        model.pin(keys)
        running.append(keys)
        if len(running) > 3:
            done = running.pop(t % 3)
            ghost.unpin(done)
            model.unpin(done)
        if t % 5 == 0:
            ghost.shrink(room - 6)
            model.shrink(room - 6)
        _same(ghost, model)
    assert ghost._chain and model.host_hit_tokens > 0 and model.parked


def _replay(ghost: ShadowLRU, model: KeyModel, steps) -> None:
    for op, *args in steps:
        if op == "admit":
            keys, room = args
            assert ghost.admit_tiers(list(keys), [1] * len(keys), room) == \
                model.admit_tiers(keys, [1] * len(keys), room)
        else:
            getattr(ghost, op)(*args)
            getattr(model, op)(*args)
        _same(ghost, model)


def test_a_chained_key_held_past_a_missing_one_is_found():
    """Chained keys, yet a key is held while the key before it is not: two requests pinned
    ``a b c`` and ``a b``; eviction passed over all three; the first finished (``c`` back as the
    least recent device unit), then the second (``a b`` back before it), so eviction takes ``b``
    before ``c``. ``a b c d`` then meets ``c`` after a missing key: held, though no run's first
    key is ``b``, and a new run of it would hold ``c`` twice (the model keeps one)."""
    a, b, c, d, e = (0,), (0, 1), (0, 1, 2), (0, 1, 2, 3), (5,)
    ghost, model = ShadowLRU(3), KeyModel(3, 0)
    _replay(ghost, model, [("admit", [a, b, c], 3), ("pin", [a, b, c]), ("admit", [a, b], 3), ("pin", [a, b]),
                           ("admit", [e], 1), ("unpin", [a, b, c]), ("unpin", [a, b]), ("shrink", 2)])
    assert list(ghost._state()[0]) == [c, e] and ghost._chain  # c is held, b is not
    _replay(ghost, model, [("admit", [a, b, c, d], 4)])
    assert not ghost._fast  # c twice: the model's step
    assert model.used == ghost.used == 4


def test_a_key_after_another_key_than_before_is_not_taken_for_new():
    """``b`` first came after ``z``, then after ``y`` (a replay that left a 0-token block out).
    ``x z b`` then finds ``x`` (run ``x y b``), then ``z``, then ``b``, the third key of ``x y b``:
    no run's first key, yet not new; taken for new, it would be held twice (the model: once)."""
    x, y, z, b = "x", "y", "z", "b"
    ghost, model = ShadowLRU(10, 10), KeyModel(10, 10)
    _replay(ghost, model, [("admit", [x, z, b], 10), ("shrink", 2), ("admit", [x, y], 10)])
    assert ghost._chain and list(ghost._state()[1]) == [b]  # b alone, on the host
    _replay(ghost, model, [("admit", [x, y, b], 10)])
    assert ghost._chain  # b loaded back, after y now
    _replay(ghost, model, [("admit", [x, z, b], 10)])
    assert not ghost._fast  # the model's step: b is met twice on the walk (x y b, then b)
    assert ghost.used == model.used == 4


def test_pins_of_keys_that_are_not_a_chain_reach_every_held_key():
    """Unpinning keys the index of first keys cannot follow: ``a c`` (``c`` is held, third in the
    run of ``a b c``, after another key than ``a``), and ``q a`` (``a`` is held past ``q``, never
    admitted). The pins of every held key among them drop, as the model's do."""
    a, b, c, q = "a", "b", "c", "q"
    for keys in ([a, c], [q, a]):
        ghost, model = ShadowLRU(10), KeyModel(10, 0)
        _replay(ghost, model, [("admit", [a, b, c], 10), ("pin", [a, b, c]), ("unpin", keys)])
        assert ghost._state()[3] == {k: 1 for k in (a, b, c) if k not in keys}


def test_unpins_of_keys_that_are_a_runs_but_for_one_key():
    """Keys as long as a pinned run, equal to it but for one key (the last, or one inside): the
    run's other keys are unpinned, that key stays pinned, as in the model (the shortcut for a
    prompt that is one run, whole, must not take them for the run)."""
    a, b, c, x = "a", "b", "c", "x"
    for keys in ([a, b, x], [a, x, c]):
        ghost, model = ShadowLRU(10), KeyModel(10, 0)
        _replay(ghost, model, [("admit", [a, b, c], 10), ("pin", [a, b, c]), ("unpin", keys)])
        assert ghost._state()[3] == {k: 1 for k in (a, b, c) if k not in keys}


def test_steps_past_gone_runs_that_only_the_key_index_follows():
    """Each is a step the index of first keys must hand to the key index, compared with the
    model: a prompt that meets one gone run twice (``p q p q``); a key held second in its run
    after gone runs were forgotten (``y`` of ``x y``); a key that was the first of the second
    gone run a prompt brought back, now inside the prompt's run (``k3``)."""
    p, q = "p", "q"
    ghost, model = ShadowLRU(4, 0), KeyModel(4, 0)
    _replay(ghost, model, [("admit", [p, q], 4), ("shrink", 0), ("admit", [p, q, p, q], 4)])

    a, b, c, x, y = "a", "b", "c", "x", "y"
    ghost, model = ShadowLRU(4, 0), KeyModel(4, 0)
    ghost._gone_cap = ghost._gone_floor = 0  # forget gone runs at once
    _replay(ghost, model, [("admit", [a, b, c], 4), ("admit", [x, y], 2)])
    assert ghost._chain and ghost._seen == {x, y}
    _replay(ghost, model, [("admit", [y], 4)])

    k0, k1, k2, k3 = [tuple(range(d + 1)) for d in range(4)]
    ghost, model = ShadowLRU(4, 3), KeyModel(4, 3)
    _replay(ghost, model, [("admit", [k0, k1, k2, k3], 4), ("shrink", 0), ("admit", ["z1", "z2"], 2), ("shrink", 0)])
    gone = {run.keys[0]: run.keys for run in ghost._starts.values() if run.tier == 3}
    assert gone == {k3: [k3], k1: [k1, k2]} and list(ghost._state()[1]) == [k0, "z2", "z1"]
    _replay(ghost, model, [("admit", [k0, k1, k2, k3], 4), ("admit", [k3], 4)])
