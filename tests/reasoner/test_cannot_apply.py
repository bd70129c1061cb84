"""Crashes that no incumbent can fix are told apart from those a configuration causes."""

from __future__ import annotations

import pytest

from autotune.reasoner.cannot_apply import blamed, fixed_reason
from autotune.loop.tuner import frame_limit


@pytest.mark.parametrize("reason, stderr", [
    ("ValueError: Your setup doesn't support bf16/gpu. You need to assign use_cpu if you want to train the model "
     "on CPU.", None),
    ("crash", "Traceback ...\nModuleNotFoundError: No module named 'flash_attn'\n"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", None),
    ("crash", "ValueError: When `padding_free=True` without packing, `max_length` is not enforced. Either enable "
              "packing (e.g., `packing=True, packing_strategy='bfd'`), provide already truncated inputs, or set "
              "`max_length=None`.\n"),
])
def test_a_crash_of_the_machine_or_install_is_fixed(reason, stderr):
    assert fixed_reason(reason, stderr)


@pytest.mark.parametrize("reason", ["RuntimeError: this script breaks with a larger batch",
                                    "CUDA out of memory. Tried to allocate 2.00 GiB", None])
def test_a_crash_a_configuration_may_cause_is_not(reason):
    assert fixed_reason(reason) is None


def test_the_limit_it_becomes_is_what_the_ranking_checks():
    why = fixed_reason("ValueError: Your setup doesn't support bf16/gpu.")
    frame = {"limits": [{"knob": "precision", "value": "bf16", "reason": f"cannot apply here: {why}"}]}
    assert frame_limit(frame, "precision", "bf16").startswith("cannot apply here: ValueError: Your setup")
    assert frame_limit(frame, "precision", "fp16") is None


def test_a_combination_that_crashes_on_the_machine_blames_the_change_the_reason_names():
    why = fixed_reason("ValueError: Your setup doesn't support bf16/gpu. You need to assign use_cpu")
    assert blamed(why, [("padding", "longest"), ("precision", "bf16")]) == ("precision", "bf16")
    assert blamed(why, [("precision", "bf16")]) == ("precision", "bf16")
    # A reason that names none of the changes (or two of them) refuses none: each stays to be tried alone.
    assert blamed("No module named 'liger_kernel'", [("padding", "longest"), ("precision", "bf16")]) is None


def test_a_hub_kernel_that_does_not_load_here_is_refused_where_the_combination_names_it():
    # transformers' words when the kernels package cannot load it (no build for this torch, no network).
    why = fixed_reason("crash", "ValueError: An error occurred while trying to load from "
                                "'kernels-community/flash-attn2': Cannot find a build variant for this system.\n")
    assert why and "kernels-community/flash-attn2" in why
    changes = [("precision", "bf16"), ("attn_implementation", "kernels-community/flash-attn2")]
    assert blamed(why, changes) == ("attn_implementation", "kernels-community/flash-attn2")
