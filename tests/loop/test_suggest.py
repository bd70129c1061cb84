"""`autotune suggest`: advice from the beliefs alone, in the documented direction for memory-bound
and roomy jobs, as a table or JSON, with one clear line for bad input."""

from __future__ import annotations

import json

import pytest

from autotune.cli.main import main
from autotune.loop.advice import estimate_headroom, model_shape

COMMON = ["model=Qwen/Qwen2.5-1.5B", "precision=bf16", "attn_implementation=sdpa"]
TIGHT = COMMON + ["gpu=4090", "max_len=4096"]          # 24 GB, long rows: memory is the constraint
ROOMY = COMMON + ["gpu=H100", "max_len=512"]           # 80 GB, short rows: room for a larger micro-batch
COMBINED = "gradient_checkpointing=True+per_device_train_batch_size=2"


def advice(capsys, words):
    assert main(["suggest", *words, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def changes(result):
    return [h["change"] for h in result["hypotheses"]]


def test_a_24gb_card_at_4096_ranks_checkpointing_for_a_larger_micro_batch_above_a_plain_increase(capsys):
    tight = advice(capsys, TIGHT)
    assert tight["features"]["gpu_mem_gb"] == 24 and tight["features"]["headroom"] < 0.3
    order = changes(tight)
    assert COMBINED in order
    assert order.index(COMBINED) < order.index("per_device_train_batch_size=2")
    combined = tight["hypotheses"][order.index(COMBINED)]
    assert "P26" in combined["claims"] and combined["sources"]


def test_an_80gb_card_at_512_ranks_a_larger_micro_batch_high_and_checkpointing_last(capsys):
    roomy = advice(capsys, ROOMY)
    assert roomy["features"]["gpu_mem_gb"] == 80 and roomy["features"]["headroom"] >= 0.5
    order = changes(roomy)
    assert order.index("per_device_train_batch_size=2") < 3
    assert COMBINED not in order
    assert order.index("gradient_checkpointing=True") > order.index("per_device_train_batch_size=2")
    micro = roomy["hypotheses"][order.index("per_device_train_batch_size=2")]
    assert micro["p_helps"] > 0.5 and micro["expected_ratio"] > 1.1 and "P01" in micro["rationale"]


def test_the_table_names_claims_sources_and_what_is_unknown(capsys):
    assert main(["suggest", *TIGHT]) == 0
    out = capsys.readouterr().out
    assert "P26" in out and "padding_share unknown" in out and "estimate" in out


def test_known_features_change_the_advice(capsys):
    without = changes(advice(capsys, ROOMY))
    with_padding = changes(advice(capsys, ROOMY + ["padding_share=0.6"]))
    assert with_padding[0] == "padding=padding_free" != without[0]


@pytest.mark.parametrize("words, needle", [
    (["max_len=512"], "missing required key 'model'"),
    (["model=7B"], "missing required key 'max_len'"),
    (["model=7B", "max_len=512", "colour=red"], "unknown key 'colour'"),
    (["model=some/model", "max_len=512"], "cannot tell its size"),
    (["model=7B", "max_len=lots"], "max_len='lots'"),
    (["model=7B", "max_len=512", "gpu_mem=lots"], "gpu_mem='lots'"),
    (["model=7B", "max_len=512", "padding_share=2"], "padding_share='2'"),
    (["model=7B", "max_len=512", "effective_batch=6", "per_device_train_batch_size=4"], "does not divide"),
    (["model=7B", "max_len=512", "allow_numerics_change=maybe"], "allow_numerics_change='maybe'"),
])
def test_bad_input_gets_one_line_and_exit_2(capsys, words, needle):
    assert main(["suggest", *words]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_model_size_is_read_from_a_name_or_a_preset():
    assert model_shape("Qwen/Qwen2.5-7B").params == 7e9
    assert model_shape("500M").params == 5e8
    assert model_shape("tiny-qwen2").params < 1e6


def test_headroom_estimate_shrinks_with_rows_and_grows_with_the_card():
    shape = model_shape("1.5B")
    from autotune.config.knobs import Knobs

    knobs = Knobs(precision="bf16", attn_implementation="sdpa")
    assert estimate_headroom(shape, 4096, 24, "lora", knobs) < estimate_headroom(shape, 512, 24, "lora", knobs)
    assert estimate_headroom(shape, 4096, 24, "lora", knobs) < estimate_headroom(shape, 4096, 80, "lora", knobs)
    checkpointed = Knobs(precision="bf16", attn_implementation="sdpa", gradient_checkpointing=True)
    assert estimate_headroom(shape, 4096, 24, "lora", checkpointed) > estimate_headroom(shape, 4096, 24, "lora", knobs)


def test_a_local_config_with_gpt2_names_or_unknown_names(tmp_path, capsys):
    gpt2 = tmp_path / "gpt2"
    gpt2.mkdir()
    (gpt2 / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
                                                  "vocab_size": 50257}))
    assert 100e6 < model_shape(str(gpt2)).params < 200e6
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "config.json").write_text(json.dumps({"model_type": "odd"}))
    assert main(["suggest", f"model={odd}", "max_len=512"]) == 2
    assert "model=SIZE" in capsys.readouterr().err


def test_settings_that_change_the_numbers_are_advised_only_with_the_opt_in(capsys):
    words = ["model=Qwen/Qwen2.5-7B", "method=lora", "max_len=4096", "gpu=4090"]
    held = advice(capsys, words)
    assert "optim=adamw_bnb_8bit" not in changes(held)
    assert any(s["change"] == "optim=adamw_bnb_8bit" and "allow_numerics_change=true" in s["why"]
               for s in held["skipped"])
    allowed = advice(capsys, words + ["allow_numerics_change=true"])
    assert "optim=adamw_bnb_8bit" in changes(allowed)


def test_a_fit_proposes_only_what_tune_would_try_for_the_job(capsys):
    """A full fine-tune keeps fp32 master weights (no dtype=bfloat16) and a text job's SFTTrainer has the
    chunked loss already: neither is advised, and each is listed with tune's reason."""
    result = advice(capsys, ["model=Qwen/Qwen2.5-1.5B", "max_len=16384", "gpu=H100"])
    first = result["hypotheses"][0]
    assert first["source"] == "fit" and any("what makes it fit is ranked first" in n for n in result["notes"])
    assert not any("dtype=" in c or "chunked_cross_entropy=True" in c for c in changes(result))
    why = {s["change"]: s["why"] for s in result["skipped"]}
    assert "SFTTrainer" in why["chunked_cross_entropy=True"]


def test_logits_count_only_where_the_loss_holds_them():
    """A text job's loss is TRL's fused LM head: the chunked loss saves nothing there, and does in an
    image-text model's own loop."""
    from autotune.config.knobs import Knobs

    plain, chunked = Knobs(precision="bf16"), Knobs(precision="bf16", chunked_cross_entropy=True)
    text, vision = model_shape("Qwen/Qwen2.5-1.5B"), model_shape("tiny-qwen2-vl")
    assert estimate_headroom(text, 4096, 24, "sft", plain) == estimate_headroom(text, 4096, 24, "sft", chunked)
    assert estimate_headroom(vision, 4096, 1, "sft", plain) < estimate_headroom(vision, 4096, 1, "sft", chunked)


def test_a_job_no_change_makes_fit_is_told_so_rather_than_that_a_fit_is_ranked_first(capsys):
    result = advice(capsys, ["model=70B", "max_len=2048", "gpu=4090"])
    note = next(n for n in result["notes"] if "does not fit" in n)
    assert "ranked first" not in note and "no change autotune can make fits it" in note
    assert not [h for h in result["hypotheses"] if h["source"] == "fit"]


def test_the_opt_in_reads_as_tunes_does(capsys):
    assert main(["suggest", "model=7B", "max_len=512", "allow_numerics_change=yes"]) == 2
    assert "allow_numerics_change='yes'" in capsys.readouterr().err


@pytest.mark.parametrize("batch", ["65536", "65520", "999999999999999999"])
def test_suggest_answers_at_once_for_any_batch(capsys, batch):
    """A batch of 10**18 is refused by its range, the largest allowed ranked in well under a second of work
    (the divisors are found up to the square root, not by counting to the batch)."""
    import time

    started = time.process_time()
    code = main(["suggest", "model=7B", "max_len=512", f"effective_batch={batch}", "--json"])
    assert time.process_time() - started < 5  # CPU time: a loaded machine does not fail it
    assert code == (0 if len(batch) < 6 else 2)
