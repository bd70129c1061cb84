"""The built-in runner, run as the executor runs it (a child process), on tiny models."""

from __future__ import annotations

import json

from conftest import make_spec, run_runner, tiny_job

from autotune.config.knobs import Knobs
from autotune.probes import parity
from autotune.schemas import validate
from autotune.workloads.jobs import job_from_dict


def test_frame_sizes_up_device_model_and_data(tmp_path, framed):
    frame = framed()
    assert frame["device"]["kind"] == "cpu"
    assert frame["model"]["params"] > 0 and frame["model"]["layers"] == 2
    data = frame["data"]
    # Synthetic rows have the skew of chat SFT data: median well below the cap, a tail that reaches it.
    assert data["p10_len"] < data["p50_len"] < data["p90_len"] <= 64
    assert data["padding_share"] > 0.3
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert len(rows) == 4 * 6 and all(2 <= len(r) <= 64 for r in rows)


def test_synthetic_rows_are_the_same_for_every_frame(tmp_path, framed):
    framed()
    first = (tmp_path / "rows.json").read_text()
    run_runner(tmp_path, make_spec(tmp_path, "frame"), "frame-again")
    assert (tmp_path / "rows.json").read_text() == first


def test_trial_measures_throughput_memory_and_parity_losses(tmp_path, framed):
    frame = framed()
    spec = make_spec(tmp_path, ceiling=True, peaks=frame["device"]["peaks"], profile_steps=1)
    result = run_runner(tmp_path, spec, "trial")
    assert result["state"] == "complete", result
    measurement = result["measurement"]
    validate("measurement", measurement)
    assert measurement["env"]["trainer"].startswith("trl.SFTTrainer ")  # trained inside the installed trainer
    assert measurement["samples_per_s"] > 0 and measurement["tokens_per_s"] > 0
    assert len(measurement["step_times_s"]) == 3
    assert len(measurement["parity_losses"]["step1"]) == 4  # one loss per row of the first step
    assert measurement["peak_memory"]["bytes"] > 0
    assert 0 < measurement["ceiling"]["bytes"] <= measurement["ceiling"]["limit_bytes"]
    assert measurement["ceiling"]["fits"] is True
    # MFU against the measured fp32 peak of this CPU: real, below 1, and HFU = MFU without checkpointing.
    assert 0 < measurement["mfu"] < 1 and measurement["hfu"] == measurement["mfu"]
    breakdown = measurement["breakdown"]
    assert breakdown["steps"] == 1 and breakdown["forward_share"] > 0 and breakdown["backward_share"] > 0
    assert 0 < breakdown["padding_share"] < 1  # the naive config pads every row to max_len
    assert measurement["nvml"] is None  # no GPU, no readings


def test_a_worst_case_batch_over_the_memory_limit_is_oom_without_being_timed(tmp_path, framed):
    framed()
    job = tiny_job(mem_limit="64MiB")
    result = run_runner(tmp_path, make_spec(tmp_path, job=job, ceiling=True), "ceiling")
    assert result["state"] == "oom", result
    assert "worst-case batch" in result["reason"] and "GiB" in result["reason"]
    assert "measurement" not in result
    assert result["ceiling"]["limit_bytes"] == int(64 * 2**20 * 0.9) < result["ceiling"]["bytes"]


def test_micro_batch_split_and_padding_keep_parity(tmp_path, framed):
    framed()
    job = tiny_job()
    base = run_runner(tmp_path, make_spec(tmp_path), "base")["measurement"]["parity_losses"]
    changed = job.start.with_change("per_device_train_batch_size", 4).with_change("padding", "padding_free")
    cand = run_runner(tmp_path, make_spec(tmp_path, knobs=changed), "cand")["measurement"]["parity_losses"]
    assert parity.compare(base, cand, parity.tolerance("fp32", "fp32"))["ok"]


def test_leaking_padding_free_fails_parity(tmp_path, framed):
    """Packing with only position_ids (DataCollatorWithFlattening's way) lets rows attend to each other."""
    framed()
    job = tiny_job()
    packed = job.start.with_change("per_device_train_batch_size", 4).with_change("padding", "padding_free")
    base = run_runner(tmp_path, make_spec(tmp_path), "base")["measurement"]["parity_losses"]
    for attn in ("eager", "sdpa"):
        knobs = packed.with_change("attn_implementation", attn)
        leaky = run_runner(tmp_path, make_spec(tmp_path, knobs=knobs, leak_packed_rows=True), f"leak-{attn}")
        verdict = parity.compare(base, leaky["measurement"]["parity_losses"], parity.tolerance("fp32", "fp32"))
        assert not verdict["ok"], verdict
        masked = run_runner(tmp_path, make_spec(tmp_path, knobs=knobs), f"masked-{attn}")
        assert parity.compare(base, masked["measurement"]["parity_losses"], parity.tolerance("fp32", "fp32"))["ok"]


def test_lora_trains_only_adapters(tmp_path, framed):
    job = tiny_job(method="lora")
    frame = framed(job)
    assert 0 < frame["model"]["trainable_params"] < frame["model"]["params"] / 2
    result = run_runner(tmp_path, make_spec(tmp_path, job=job), "lora")
    assert result["state"] == "complete", result


def test_text_file_dataset_and_local_model_folder(tmp_path):
    """The real loading path: a local jsonl through datasets, a saved model and tokenizer through from_pretrained."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

    texts = [f"question {i}: how long is a piece of string? answer: " + "very " * (i % 17) + "long" for i in range(60)]
    data = tmp_path / "chat.jsonl"
    data.write_text("\n".join(json.dumps({"instruction": t.split(":")[0], "output": t}) for t in texts))
    raw = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[EOS]"]))
    folder = tmp_path / "model"
    PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="[PAD]", eos_token="[EOS]").save_pretrained(folder)
    config = Qwen2Config(vocab_size=raw.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    job = job_from_dict("t", {"model": str(folder), "dataset": str(data), "max_len": 32, "effective_batch": 4})
    frame_spec = make_spec(tmp_path, "frame", job=job)
    frame_spec["job"]["smoke"] = False  # CUDA_VISIBLE_DEVICES is empty in run_runner: this stays on the CPU
    frame = run_runner(tmp_path, frame_spec, "frame")
    assert frame["state"] == "complete", frame
    assert frame["frame"]["model"]["source"] == f"config of {folder}"
    assert frame["frame"]["data"]["rows_sampled"] == 60
    trial = run_runner(tmp_path, make_spec(tmp_path, job=job) | {"job": frame_spec["job"]}, "trial")
    assert trial["state"] == "complete", trial


def test_a_known_device_reuses_its_cached_peaks(tmp_path, framed):
    frame = framed()
    peaks = frame["device"]["peaks"]
    cache = {peaks["fingerprint"]: {**peaks, "matmul_flops": {**peaks["matmul_flops"], "fp32": 4.2e10}}}
    again = run_runner(tmp_path, make_spec(tmp_path, "frame", peak_cache=cache), "frame-cached")
    cached = again["frame"]["device"]["peaks"]
    assert cached["cached"] is True and cached["matmul_flops"]["fp32"] == 4.2e10


def test_a_recorded_peak_the_trial_beats_is_read_again_before_the_trial_is_judged(tmp_path, framed):
    """A recorded peak is one reading (on shared cores, perhaps under load): a trial over it is judged
    against the device's fastest product read again, and its record says which bound it was judged by."""
    frame = framed()
    peaks = {**frame["device"]["peaks"], "matmul_flops": {"fp32": 1.0}}  # a peak no real device has
    result = run_runner(tmp_path, make_spec(tmp_path, peaks=peaks), "stale-peak")
    assert result["state"] == "complete", result
    measurement = result["measurement"]
    again = measurement["peak_remeasured"]
    assert again["recorded_flops"] == 1.0 and again["recorded_mfu"] > 1 and again["flops"] > 1e6
    assert measurement["peak_flops"] == again["flops"] and 0 < measurement["mfu"] <= 1


def test_parity_reads_with_dropout_off_and_the_timed_steps_keep_it(tmp_path):
    """A GPT-2 style model with dropout 0.1: micro-batch 1 and 2 train the same thing, and parity says so
    (its two steps run with every dropout at 0); the steps after them train with the model's dropout,
    so their losses differ between the two splits (other masks) by more than parity's fp32 tolerance."""
    from transformers import AutoModelForCausalLM, GPT2Config

    folder = tmp_path / "gpt2"
    config = GPT2Config(vocab_size=512, n_positions=64, n_embd=32, n_layer=2, n_head=2, bos_token_id=1, eos_token_id=2)
    assert config.resid_pdrop == config.attn_pdrop == config.embd_pdrop == 0.1
    import torch

    torch.manual_seed(0)  # the same weights every run: how far dropout moves the final loss depends on them
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    job = job_from_dict("t", {"model": str(folder), "dataset": "synthetic", "max_len": 32, "effective_batch": 4})
    frame = run_runner(tmp_path, make_spec(tmp_path, "frame", job=job), "frame")
    assert frame["state"] == "complete", frame
    results = {micro: run_runner(tmp_path, make_spec(tmp_path, job=job, knobs=job.start.with_change(
        "per_device_train_batch_size", micro)), f"micro{micro}")["measurement"] for micro in (1, 2)}
    verdict = parity.compare(results[1]["parity_losses"], results[2]["parity_losses"], parity.tolerance("fp32", "fp32"))
    assert verdict["ok"], verdict
    first, second = results[1]["final_loss"], results[2]["final_loss"]
    assert abs(first - second) > parity.tolerance("fp32", "fp32") * abs(first), (first, second)


def test_group_by_length_orders_the_measured_rows_as_the_trainer_does():
    """The measured rows are the same set, in the order of transformers' LengthGroupedSampler (seeded:
    every grouping trial sees one order); the parity steps keep the frame's order."""
    import torch
    from transformers.trainer_pt_utils import LengthGroupedSampler

    from autotune.workloads.hf.sft import text_plan

    rows = [[5] * (2 + (7 * i) % 60) for i in range(4 * 6)]
    job = tiny_job(effective_batch=4, seed=0)
    knobs = Knobs(per_device_train_batch_size=2, group_by_length=False)
    plain = text_plan(rows, knobs, job, 3, 2, 0)
    grouped = text_plan(rows, knobs.with_change("group_by_length", True), job, 3, 2, 0)
    flat = [[r for micro in step for r in micro] for step in grouped.measured]
    measured = list(range(8, 20))
    assert grouped.parity == plain.parity and sorted(sum(flat, [])) == measured
    order = list(LengthGroupedSampler(4, lengths=[len(rows[r]) for r in measured],
                                      generator=torch.Generator().manual_seed(0)))
    assert sum(flat, []) == [measured[i] for i in order] != measured


def test_the_cpu_knob_values_train_inside_the_trainer_and_keep_parity(tmp_path, framed):
    """Every knob moved at once to a value this CPU can take (torch.compile aside: a minute of compiling),
    through SFTTrainer's own handling of each: bf16 autocast, sdpa, activation checkpointing, a forked
    loader worker, fused AdamW, padding to the longest row with length grouping."""
    frame = framed()
    job = tiny_job()
    base = run_runner(tmp_path, make_spec(tmp_path), "base")["measurement"]["parity_losses"]
    knobs = job.start
    for name, value in (("precision", "bf16"), ("attn_implementation", "sdpa"), ("gradient_checkpointing", True),
                        ("dataloader_num_workers", 1), ("optim", "adamw_torch_fused"), ("padding", "longest"),
                        ("group_by_length", True), ("per_device_train_batch_size", 2)):
        knobs = knobs.with_change(name, value)
    result = run_runner(tmp_path, make_spec(tmp_path, knobs=knobs, ceiling=True, peaks=frame["device"]["peaks"]), "all")
    assert result["state"] == "complete", result
    assert result["measurement"]["ceiling"]["fits"] and result["measurement"]["breakdown"] is None
    assert parity.compare(base, result["measurement"]["parity_losses"], parity.tolerance("fp32", "bf16"))["ok"]
