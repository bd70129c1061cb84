"""What the trials refute, and what the loop tries once the single changes are spent."""

from __future__ import annotations

import math

from autotune.loop.next_change import next_hypotheses
from autotune.config.knobs import Knobs
from autotune.reasoner import Hypothesis
from autotune.reasoner.links import linked, refuted, reverts, tried_here
from autotune.reasoner.surrogate import proposals

CPU = {"kind": "cpu", "cpu_count": 2, "bf16": False, "compile": True, "fused_adamw": True, "memory_bytes": 2**34}
START = Knobs()


def trial(n: int, knobs: Knobs, change: str, ratio: float, decision: str = "discard", source: str = "rank",
          spread: float = 0.02) -> dict:
    return {"trial": n, "change": change, "knobs": knobs.to_dict(), "state": "complete", "decision": decision,
            "ratio": ratio, "interval": [ratio * (1 - spread), ratio * (1 + spread)], "noise_floor": 0.01,
            "measurements": [], "hypothesis": {"source": source}}


def baseline() -> dict:
    return {"trial": 0, "change": None, "knobs": START.to_dict(), "state": "complete", "decision": "baseline",
            "ratio": None, "interval": None, "measurements": []}


def allow_all(hypotheses, skipped):
    return hypotheses, skipped


def test_the_interaction_table_and_the_beliefs_link_knobs():
    assert {"padding", "optim", "gradient_checkpointing", "torch_compile"} <= linked("per_device_train_batch_size")
    assert "optim" not in linked("attn_implementation")


def test_a_change_that_lost_is_not_retried_where_only_unlinked_knobs_changed_but_is_where_a_linked_one_did():
    micro = Hypothesis("per_device_train_batch_size", 8, "")
    records = [baseline(), trial(1, START.with_change("per_device_train_batch_size", 8), micro.change, 0.7),
               trial(2, START.with_change("dataloader_num_workers", 2), "dataloader_num_workers=2", 1.2, "keep")]
    on_workers = START.with_change("dataloader_num_workers", 2)
    why = refuted(micro, on_workers, records)
    assert why and "lost x0.700" in why and "dataloader_num_workers" in why
    assert refuted(micro, START.with_change("attn_implementation", "sdpa"), records) is None  # linked too
    assert refuted(micro, START.with_change("padding", "padding_free"), records) is None  # padding is linked
    # A loss within the noise refutes nothing.
    close = [baseline(), trial(1, START.with_change("per_device_train_batch_size", 8), micro.change, 0.99)]
    assert refuted(micro, on_workers, close) is None


def test_a_change_measured_here_and_not_kept_waits_for_the_changes_not_yet_measured():
    sdpa = Hypothesis("attn_implementation", "sdpa", "", expected_ratio=1.1)  # as an unknown change is
    padding = Hypothesis("padding", "padding_free", "", expected_ratio=1.1)
    bigger = START.with_change("per_device_train_batch_size", 2)
    records = [baseline(), trial(1, START.with_change("attn_implementation", "sdpa"), sdpa.change, 0.99),
               trial(2, bigger, "per_device_train_batch_size=2", 1.5, "keep")]
    # The micro-batch is linked to the attention kernel, so the within-noise result refutes nothing...
    assert refuted(sdpa, bigger, records) is None
    # ...but the ranking does not try it again ahead of what this run has not measured.
    why = tried_here(sdpa, bigger, records)
    assert why and "x0.990 [0.970, 1.010] in trial 1, short of the x1.10" in why
    measured = {tuple(sorted(Knobs.from_dict(r["knobs"]).to_dict().items())) for r in records}
    skipped: list = []
    hypotheses, stop = next_hypotheses(bigger, [sdpa, padding], records, CPU, 8, measured, [], {}, 0.01, allow_all,
                                       skipped)
    assert stop is None and [h.change for h in hypotheses] == ["padding=padding_free"]
    assert skipped == [("attn_implementation=sdpa", why)]  # the report says why it was not tried again
    # Once those are spent it is the model of all trials that may propose it again, not the beliefs.
    hypotheses, _ = next_hypotheses(bigger, [sdpa], records, CPU, 8, measured, [], {}, 0.01, allow_all, [])
    assert all(h.source != "rank" for h in hypotheses)
    # A kept change, or a micro-batch reached from another value, is another matter.
    smaller = Hypothesis("per_device_train_batch_size", 2, "")
    assert tried_here(smaller, START.with_change("per_device_train_batch_size", 4), records) is None
    assert tried_here(padding, bigger, records) is None
    # Where the noise left room for the gain the beliefs expect (a wide interval), it is tried again.
    noisy = [baseline(), trial(1, START.with_change("attn_implementation", "sdpa"), sdpa.change, 0.99, spread=0.3),
             trial(2, bigger, "per_device_train_batch_size=2", 1.5, "keep")]
    assert tried_here(sdpa, bigger, noisy) is None
    # A loss far beyond what an interaction turns around is left to the model too; a smaller one is not.
    for ratio, left in ((0.5, True), (0.85, False)):
        lost = [baseline(), trial(1, START.with_change("attn_implementation", "sdpa"), sdpa.change, ratio),
                trial(2, bigger, "per_device_train_batch_size=2", 1.5, "keep")]
        assert bool(tried_here(sdpa, bigger, lost)) is left


def test_a_change_a_first_run_screened_out_is_tried_again_once_a_linked_knob_changed():
    eight = Hypothesis("per_device_train_batch_size", 8, "", expected_ratio=1.1)
    on = START.with_change("per_device_train_batch_size", 16)
    screened = dict(trial(1, on.with_change("per_device_train_batch_size", 8), eight.change, 0.89, spread=0.13),
                    confidence=0.9)  # "not faster after two runs": the screen's 90% interval
    longest = on.with_change("padding", "longest")
    records = [baseline(), trial(1, on, "per_device_train_batch_size=16", 1.6, "keep"), {**screened, "trial": 2},
               trial(3, longest, "padding=longest", 1.3, "keep")]
    # Padding is linked to the micro-batch: on the new incumbent the screen says little.
    assert tried_here(eight, longest, records) is None
    # Where only an unlinked knob changed, it says as much as before...
    workers = on.with_change("dataloader_num_workers", 2)
    unlinked = [*records[:3], trial(3, workers, "dataloader_num_workers=2", 1.3, "keep")]
    assert tried_here(eight, workers, unlinked) and "short of the x1.10" in tried_here(eight, workers, unlinked)
    # ...and an interval from the pairs is left to the model after a linked change too.
    paired = [*records[:2], {**screened, "trial": 2, "confidence": 0.998}, records[3]]
    assert tried_here(eight, longest, paired)


def test_the_parts_of_a_kept_warm_start_are_undone_one_at_a_time():
    kept = START.with_change("per_device_train_batch_size", 8).with_change("padding", "padding_free")
    records = [baseline(), trial(1, kept, "per_device_train_batch_size=8+padding=padding_free", 1.6, "keep",
                                 source="warm_start")]
    undo = reverts(kept, records, set(), CPU, 8)
    assert [h.change for h in undo] == ["padding=max_length", "per_device_train_batch_size=1"]


def test_once_the_singles_are_spent_the_model_proposes_a_pair_and_stops_below_the_floor():
    # Each change alone lost a little; sdpa is linked to padding: the pair is what is left to try.
    records = [baseline(), trial(1, START.with_change("padding", "padding_free"), "padding=padding_free", 0.97),
               trial(2, START.with_change("attn_implementation", "sdpa"), "attn_implementation=sdpa", 0.98)]
    measured = {tuple(sorted(Knobs.from_dict(r["knobs"]).to_dict().items())) for r in records}
    ranked = proposals(START, records, CPU, 8, measured)
    assert ranked and all(h.source == "model" for h in ranked) and ranked[0].score >= ranked[-1].score
    hypotheses, stop = next_hypotheses(START, [], records, CPU, 8, measured, [], {}, 0.01, allow_all, [])
    assert stop is None and len(hypotheses) == 1 and hypotheses[0].source == "model"
    # With every config near the incumbent measured a clear loss, nothing is worth a trial: it says so.
    _, stop = next_hypotheses(START, [], records, CPU, 8, measured, [], {}, 10.0, allow_all, [])
    assert stop and "below the 1000.00% noise floor" in stop


def test_before_stopping_the_two_changes_the_noise_left_undecided_are_tried_together_once():
    from autotune.reasoner import key
    from autotune.reasoner.links import undecided_pair

    sdpa, fused = START.with_change("attn_implementation", "sdpa"), START.with_change("optim", "adamw_torch_fused")
    # Each lost a little, within the noise (interval holds 1); a third lost beyond it and is left out.
    records = [baseline(), trial(1, sdpa, "attn_implementation=sdpa", 0.96, spread=0.1),
               trial(2, fused, "optim=adamw_torch_fused", 0.94, spread=0.1),
               trial(3, START.with_change("gradient_checkpointing", True), "gradient_checkpointing=True", 0.7)]
    measured = {key(START), key(sdpa), key(fused)}
    changes, ratios = undecided_pair(START, records, CPU, 16, measured)
    assert dict(changes) == {"attn_implementation": "sdpa", "optim": "adamw_torch_fused"} and ratios == (0.96, 0.94)
    # A floor the model's best proposal does not clear: where the loop would stop, the pair comes first.
    chosen, why = next_hypotheses(START, [], records, CPU, 16, measured, [], {}, 0.3, allow_all, [])
    assert why is None and len(chosen) == 1 and chosen[0].source == "pooled"
    assert chosen[0].apply(START) == sdpa.with_change("optim", "adamw_torch_fused")
    # Once: with the pair measured, the loop may stop.
    both = chosen[0].apply(START)
    assert undecided_pair(START, records, CPU, 16, measured | {key(both)}) is None
    # Changes shown to lose beyond the noise are no pair: nothing is tried.
    lost = [baseline(), trial(1, sdpa, "attn_implementation=sdpa", 0.8), trial(2, fused, "optim=adamw_torch_fused", 0.85)]
    assert undecided_pair(START, lost, CPU, 16, measured) is None


GRID = {"padding", "attn_implementation", "optim", "gradient_checkpointing", "per_device_train_batch_size"}


def on_grid(hypotheses, skipped):
    return [h for h in hypotheses if all(k in GRID for k, _ in h.changes)], skipped


def test_once_the_singles_are_spent_a_pair_of_two_small_losers_is_tried_where_the_trials_are_not_additive():
    # cpu-long-tail's path: padding_free kept, then sdpa and fused AdamW each lost a little on it. The
    # table rewards the two together (x1.14); nothing links attention to the optimizer.
    free = START.with_change("padding", "padding_free")
    sdpa, fused = free.with_change("attn_implementation", "sdpa"), free.with_change("optim", "adamw_torch_fused")

    def history(checkpointing_on_free: float) -> list[dict]:
        # Checkpointing measured on both incumbents: x0.9 before padding_free, and after it either the
        # same (the trials add up) or x0.6 (they do not, and nothing links the two knobs either).
        return [baseline(), trial(1, START.with_change("gradient_checkpointing", True), "gradient_checkpointing=True",
                                  0.9),
                trial(2, free, "padding=padding_free", 3.0, "keep"),
                trial(3, free.with_change("gradient_checkpointing", True), "gradient_checkpointing=True",
                      checkpointing_on_free),
                trial(4, sdpa, "attn_implementation=sdpa", 0.87), trial(5, fused, "optim=adamw_torch_fused", 0.95)]

    from autotune.reasoner import key

    pair = sdpa.with_change("optim", "adamw_torch_fused")
    scores = {}
    for name, on_free in (("additive", 0.9), ("not additive", 0.6)):
        records = history(on_free)
        measured = {key(Knobs.from_dict(r["knobs"])) for r in records}
        ranked = on_grid(proposals(free, records, CPU, 8, measured), [])[0]
        scores[name] = next(h.score for h in ranked if h.apply(free) == pair)
    # Trials that depart from the sum of their singles widen what the model allows two changes together:
    # the pair's expected improvement clears a 1% floor only then.
    assert scores["additive"] < math.log1p(0.01) <= scores["not additive"]
