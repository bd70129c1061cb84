"""What the frame says cannot apply to its model is never tried: silently for a knob that means nothing
there (an MLP's padding), with its reason in the report's skipped list otherwise. And the runner follows
the job."""

from __future__ import annotations

from conftest import tiny_job
from tests.loop.test_tuner import FRAME, TableExecutor

from autotune.workloads.jobs import job_from_dict
from autotune.loop.tuner import Tuner, runner_for


class LimitedFrame(TableExecutor):
    def __init__(self, limits: list[dict], factors: dict) -> None:
        super().__init__(factors)
        self.limits = limits

    def run(self, spec, trial_dir, timeout_s):
        result = super().run(spec, trial_dir, timeout_s)
        if spec["kind"] == "frame":
            result = {**result, "frame": {**FRAME, "limits": self.limits}}
        return result


def test_changes_the_frame_rules_out_are_not_tried(tmp_path):
    limits = [{"knob": "padding", "reason": "nothing to pad", "silent": True},
              {"knob": "per_device_train_batch_size", "value": 2, "reason": "two rows do not fit this model"}]
    executor = LimitedFrame(limits, {("padding", "padding_free"): 3.0, ("per_device_train_batch_size", 2): 2.0})
    outcome = Tuner(tiny_job(), executor, tmp_path).run()
    tried = {r["change"] for r in outcome.records}
    assert not any(change and change.startswith("padding=") for change in tried)
    assert "per_device_train_batch_size=2" not in tried
    skipped = dict(outcome.skipped)
    assert skipped.get("per_device_train_batch_size=2") == "two rows do not fit this model"
    assert not any(change.startswith("padding=") for change in skipped)  # silent: no note
    assert all(spec["runner"] == "hf" for spec in executor.specs)


def test_the_runner_follows_the_job():
    assert runner_for(job_from_dict("m", {"model": "mlp"})) == "mlp"
    assert runner_for(tiny_job()) == "hf"


def test_an_allowed_resolution_cap_is_kept_without_parity_and_later_changes_are_held_to_its_losses(tmp_path):
    """max_image_pixels changes the losses by design (the user allowed it); the change after it keeps the
    same cap, so its losses must match the cap's, not the baseline's."""
    vlm_frame = {**FRAME, "model": {**FRAME["model"], "vision": {"model_type": "qwen2_vl"}}}
    cap = ("max_image_pixels", 256 * 28 * 28)
    executor = LimitedFrame([], {cap: 1.6, ("attn_implementation", "sdpa"): 1.5})
    executor.wrong_losses = {cap}
    run = executor.run

    def vlm_run(spec, trial_dir, timeout_s):
        result = run(spec, trial_dir, timeout_s)
        return {**result, "frame": vlm_frame} if spec["kind"] == "frame" else result

    executor.run = vlm_run
    outcome = Tuner(tiny_job(allow_image_resize=True, only=["max_image_pixels", "attn_implementation"]), executor,
                    tmp_path).run()
    records = {r["change"]: r for r in outcome.records}
    capped = records["max_image_pixels=200704"]
    assert capped["decision"] == "keep" and capped["parity"]["checked"] is False
    assert "allowed max_image_pixels" in capped["parity"]["reason"]
    sdpa = records["attn_implementation=sdpa"]
    assert sdpa["decision"] == "keep" and sdpa["parity"]["ok"] and sdpa["parity"]["worst"] == 0.0


CUDA_DEVICE = {"kind": "cuda", "cpu_count": 4, "bf16": True, "tf32": True, "compile": True, "fused_adamw": True,
               "bitsandbytes": True, "capability": "9.0", "memory_bytes": 80 * 2**30, "name": "test gpu",
               "matmul_tflops": {"fp32": 50.0},
               "peaks": {"fingerprint": "test gpu", "matmul_flops": {"fp32": 5e13}, "copy_bytes_per_s": 1e12}}


def _optim_tune(tmp_path, **keys):
    """An MLP job (its frame names no numerics limits) on a CUDA card with bitsandbytes: only optim moves."""
    executor = LimitedFrame([], {("optim", "adamw_bnb_8bit"): 1.5, ("optim", "adamw_torch_fused"): 1.1})
    run = executor.run

    def cuda_run(spec, trial_dir, timeout_s):
        result = run(spec, trial_dir, timeout_s)
        return {**result, "frame": {**result["frame"], "device": CUDA_DEVICE}} if spec["kind"] == "frame" else result

    executor.run = cuda_run
    job = job_from_dict("m", {"model": "mlp", "smoke": True, "only": "optim", **keys})
    return Tuner(job, executor, tmp_path).run()


def test_an_mlp_job_tries_no_8bit_optimizer_without_the_opt_in_and_does_with_it(tmp_path):
    outcome = _optim_tune(tmp_path / "plain")
    tried = {r["change"] for r in outcome.records}
    assert "optim=adamw_bnb_8bit" not in tried and "optim=adamw_torch_fused" in tried
    assert "allow_numerics_change=true" in dict(outcome.skipped)["optim=adamw_bnb_8bit"]
    allowed = _optim_tune(tmp_path / "allowed", allow_numerics_change=True)
    assert "optim=adamw_bnb_8bit" in {r["change"] for r in allowed.records}


class SlowBaseline(TableExecutor):
    """The baseline's first run takes 100 s; the next one is stopped by the time budget."""

    def run(self, spec, trial_dir, timeout_s):
        result = super().run(spec, trial_dir, timeout_s)
        if spec["kind"] == "frame":
            return result
        done = sum(s["kind"] == "trial" for s in self.specs)
        return {**result, "wall_s": 100.0} if done == 1 else {"state": "timeout", "reason": "budget", "wall_s": 50.0}


def test_a_budget_that_ends_in_the_baseline_says_the_time_it_needs(tmp_path):
    import pytest

    from autotune.util.errors import AutotuneError

    with pytest.raises(AutotuneError) as failed:
        Tuner(tiny_job(time="150s"), SlowBaseline({}), tmp_path).run()
    message = str(failed.value)
    assert message.startswith("the baseline config did not run: timeout")
    # Three repeats and room for one trial's two runs, at 100 s a run: 500 s, 9 minutes rounded up.
    assert message.endswith("the baseline's 3 runs and one trial need about 9 minutes on this machine now: "
                            "give time=9m or more")
