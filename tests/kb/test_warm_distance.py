"""Which past run warm-starts a new one: the nearest similar job, and none too unlike this one."""

from __future__ import annotations

from autotune.kb.experience import WARM_DISTANCE, Experience, Identity
from autotune.kb.features import distance
from autotune.kb.store import Store

BASE = {"model_family": "qwen2", "device_kind": "cpu", "method": "sft", "max_len": 256, "padding_share": 0.75}


def past(store: Store, run: str, **features: object) -> None:
    identity = Identity(f"job-{run}", "device", {})
    Experience(store).record_run(f"{run}@1", identity, {"run": run}, {**BASE, **features}, {},
                                 {"best": {"knobs": {}, "trial": 2, "speedup": 3.0}})


def test_the_nearest_past_run_warm_starts_and_none_beyond_the_warm_distance(tmp_path):
    store = Store(tmp_path)
    past(store, "near", max_len=512)
    found = Experience(store).similar_run(BASE, "cpu")
    assert found is not None and found["run"] == "near"
    # Rows of one length, another method and much shorter: another kind of job, cold.
    unlike = {**BASE, "method": "lora", "max_len": 64, "padding_share": 0.05, "length_spread": 1.0}
    other = Experience(Store(tmp_path / "other"))
    past(other.store, "far", length_spread=3.6)
    assert distance(unlike, other.store.all("runs")[0]["features"]) > WARM_DISTANCE
    assert other.similar_run(unlike, "cpu") is None
