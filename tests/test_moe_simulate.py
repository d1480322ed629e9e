"""The expert-cache simulator on traces whose answers are known."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from conftest import ONEBIT

from lemonade_onebit.moe import simulate as sim


def trace(rows, n_expert: int, used: int = 1) -> sim.Trace:
    """A trace of rows[token][layer] = expert ids."""
    return sim.make_trace({"format": sim.FORMAT, "n_layer": len(rows[0]), "n_expert": n_expert,
                           "n_expert_used": used}, [[list(ids) for ids in row] for row in rows])


def single(ids, n_expert: int) -> sim.Trace:
    return trace([[[i]] for i in ids], n_expert)


def random_trace(seed: int, tokens=60, layers=3, experts=10, used=2) -> sim.Trace:
    rng = np.random.default_rng(seed)
    rows = [[rng.choice(experts, size=used, replace=False).tolist() for _ in range(layers)]
            for _ in range(tokens)]
    return trace(rows, experts, used)


def test_lru_and_belady_give_the_textbook_fault_counts():
    """The classic reference string with 3 frames: LRU 12 faults, OPT 9 (Silberschatz)."""
    ids = [7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1]
    t = single(ids, 8)
    assert len(ids) - sim.simulate(t, "lru", 3).hits == 12
    assert len(ids) - sim.simulate(t, "belady", 3).hits == 9


@pytest.mark.parametrize("cycle,slots,hits", [(5, 4, 0), (5, 5, 45), (4, 8, 46)])
def test_lru_is_exact_on_a_cyclic_trace(cycle, slots, hits):
    """A cycle longer than the cache: LRU always evicts the next one (0 hits); one that fits:
    every access but the first of each expert hits."""
    t = single([i % cycle for i in range(50)], 8)
    result = sim.simulate(t, "lru", slots)
    assert result.hits == hits and result.accesses == 50


def test_global_lru_on_cycles_shares_the_slots_between_layers():
    """Layer 0 cycles over 6 experts, layer 1 over 2: per layer with 4 slots each, layer 0 never
    hits; one shared budget of 8 holds both cycles."""
    t = trace([[[i % 6], [i % 2]] for i in range(60)], 8)
    assert sim.simulate(t, "lru", 4).layer_hits == (0, 58)
    assert sim.simulate(t, "g-lru", 8, shared=True).hits == 120 - 8


@pytest.mark.parametrize("seed", range(12))
def test_belady_is_never_beaten(seed):
    t = random_trace(seed)
    for slots in (1, 2, 4, 7):
        best = sim.simulate(t, "belady", slots).hits
        best_shared = sim.simulate(t, "g-belady", slots).hits
        for policy in sim.PER_LAYER:
            assert sim.simulate(t, policy, slots).hits <= best, (policy, slots)
        for policy in sim.POLICIES:
            assert sim.simulate(t, policy, slots).hits <= best_shared, (policy, slots)


def test_belady_matches_an_exhaustive_search_on_small_traces():
    """The fewest misses over every eviction choice, by brute force."""
    def optimal_misses(ids, capacity):
        best = {frozenset(): 0}
        for key in ids:
            nxt: dict = {}
            for held, misses in best.items():
                if key in held:
                    options = [(held, misses)]
                elif len(held) < capacity:
                    options = [(held | {key}, misses + 1)]
                else:
                    options = [((held - {v}) | {key}, misses + 1) for v in held]
                for state, m in options:
                    nxt[state] = min(m, nxt.get(state, m))
            best = nxt
        return min(best.values())

    rng = np.random.default_rng(7)
    for _ in range(20):
        ids = rng.integers(0, 5, size=14).tolist()
        t = single(ids, 5)
        for capacity in (1, 2, 3):
            assert len(ids) - sim.simulate(t, "belady", capacity).hits == optimal_misses(ids,
                                                                                         capacity)


def test_lfu_beats_lru_on_a_zipf_trace():
    """Independent draws from a Zipf law: LFU keeps the popular experts, LRU lets a run of rare
    ones push them out."""
    rng = np.random.default_rng(3)
    weights = 1 / np.arange(1, 65) ** 1.1
    ids = rng.choice(64, size=4000, p=weights / weights.sum()).tolist()
    t = single(ids, 64)
    lfu, lru = sim.simulate(t, "lfu", 8).hit_rate, sim.simulate(t, "lru", 8).hit_rate
    assert lfu > lru + 0.03, (lfu, lru)
    assert sim.simulate(t, "belady", 8).hit_rate >= lfu


def test_slru_keeps_experts_hit_twice_through_a_scan():
    """A hot pair used twice, then a scan of new experts: LRU loses the pair, SLRU keeps it in
    its protected segment."""
    ids = [0, 1, 0, 1] + list(range(2, 6)) + [0, 1]
    t = single(ids, 8)
    assert sim.simulate(t, "lru", 4).hits == 2
    assert sim.simulate(t, "slru", 4).hits == 4


def test_a_trace_file_round_trips_and_bad_ones_are_refused(tmp_path):
    t = random_trace(1, tokens=5)
    path = tmp_path / "t.jsonl"
    sim.write_trace(path, t)
    assert sim.load_trace(path).tokens == t.tokens
    one = tmp_path / "t.json"
    one.write_text(json.dumps({"format": sim.FORMAT, "n_layer": 1, "n_expert": 4,
                               "tokens": [[[0, 1]], [[1, 2]]]}))
    assert sim.load_trace(one).tokens == (((0, 1),), ((1, 2),))
    bad = tmp_path / "bad.json"
    for body, says in ((
            {"format": sim.FORMAT, "n_layer": 1, "n_expert": 4, "tokens": [[[0, 4]]]}, "0..3"),
            ({"format": sim.FORMAT, "n_layer": 2, "n_expert": 4, "tokens": [[[0]]]}, "2 lists"),
            ({"format": sim.FORMAT, "n_layer": 1, "n_expert": 4, "tokens": [[[1, 1]]]}, "distinct"),
            ({"n_layer": 1, "tokens": []}, "header")):
        bad.write_text(json.dumps(body))
        with pytest.raises(ValueError, match=says):
            sim.load_trace(bad)


def test_simulate_command_prints_hit_rates_and_plots(tmp_path):
    path = tmp_path / "t.jsonl"
    sim.write_trace(path, random_trace(2, tokens=40))
    out = subprocess.run([ONEBIT, "moe", "simulate", "--trace", str(path), "--slots", "2,4",
                          "--policy", "lru,belady,g-lru", "--json", "--plot",
                          str(tmp_path / "hit.png")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    rates = {(r["policy"], r["per_layer_slots"]): r["hit_rate"] for r in data["results"]}
    assert set(rates) == {(p, n) for p in ("lru", "belady", "g-lru") for n in (2, 4)}
    assert rates[("belady", 4)] >= rates[("lru", 4)] > 0
    assert (tmp_path / "hit.png").stat().st_size > 1000
    text = subprocess.run([ONEBIT, "moe", "simulate", "--trace", str(path), "--slots", "4"],
                          capture_output=True, text=True)
    assert "| slots per layer | share of experts |" in text.stdout and "g-belady" in text.stdout


def test_simulate_command_refuses_a_bad_trace_in_one_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("not json\n")
    out = subprocess.run([ONEBIT, "moe", "simulate", "--trace", str(path), "--slots", "4"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "--trace" in out.stderr
    out = subprocess.run([ONEBIT, "moe", "simulate", "--trace", str(path), "--slots", "4",
                          "--policy", "fifo"], capture_output=True, text=True)
    assert out.returncode == 2 and "unknown policy 'fifo'" in out.stderr
