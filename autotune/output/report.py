"""What a user reads after a run: results.tsv, best_config.json (with a ready-to-run command), report.md."""

from __future__ import annotations

import json
import shlex
from statistics import median
from typing import Any

from ..config.job import MLP_KNOBS, Job
from ..config.knobs import Knobs
from .records import RunFolder
from ..util.io import write_json_atomic

TSV_COLUMNS = ("trial", "change", "state", "decision", "samples_per_s", "tokens_per_s", "ratio", "peak_mem_mib",
               "reason")


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def write_results_tsv(folder: RunFolder, records: list[dict[str, Any]]) -> None:
    lines = ["\t".join(TSV_COLUMNS)]
    for r in records:
        peak = r.get("peak_memory_bytes")
        cells = (r["trial"], r["change"] or "(baseline)", r["state"], r["decision"], r["samples_per_s"],
                 r.get("tokens_per_s"), r["ratio"], peak / 2**20 if peak else None, r["reason"].replace("\t", " "))
        lines.append("\t".join(_fmt(c) for c in cells))
    folder.results.write_text("\n".join(lines) + "\n")


def _packed_vlm_note(knobs: Knobs, vlm: str) -> str:
    """What the built-in runner did for packed image-text rows, which TRL does not offer."""
    mrope = (" and the model's M-RoPE positions computed per row with its `get_rope_index`, concatenated and "
             "passed as a 4 x T `position_ids` whose first row is the per-row text positions"
             if vlm in ("qwen2_vl", "qwen2_5_vl") else "")
    bounds = ("the row bounds taken from the position ids (no cu_seq_lens keyword arguments: the model hands them "
              "on to its vision tower)" if knobs.attn_implementation == "flash_attention_2" else
              "a block-diagonal attention mask")
    return (f"padding_free was measured on packed image-text rows ({vlm}): each micro-batch's rows in one sequence, "
            f"their images passed in row order, position ids restarting per row{mrope}, and {bounds}. TRL's "
            "SFTTrainer refuses padding_free for vision-language models, so the `trl sft` command above stops "
            "with an error: pack the rows that way in your own collator, or keep padding=longest with SFTTrainer.")


def caveats(knobs: Knobs, vlm: str | None = None) -> list[str]:
    """Notes on what the trainer arguments cannot say; `vlm`: the model type of an image-text model."""
    notes = []
    if knobs.padding == "padding_free" and vlm:
        notes.append(_packed_vlm_note(knobs, vlm))
    if knobs.max_image_pixels and vlm in ("idefics3", "smolvlm"):
        notes.append(f"max_image_pixels={knobs.max_image_pixels} was measured with the processor's longest edge "
                     "lowered to k tiles: k the largest whole number (at least 1) with (k x tile)^2 within that many "
                     "pixels, the tile your processor's `max_image_size[\"longest_edge\"]`. TrainingArguments and "
                     "`trl sft` have no such setting: pass it to your processor (`AutoProcessor.from_pretrained(model, "
                     "size={\"longest_edge\": k * tile})`).")
    elif knobs.max_image_pixels:
        notes.append(f"max_image_pixels={knobs.max_image_pixels} was measured with each image capped at that many "
                     "pixels before the processor. TrainingArguments and `trl sft` have no such setting: pass it to "
                     "your processor (Qwen2-VL: `AutoProcessor.from_pretrained(model, max_pixels=...)`).")
    if knobs.freeze_vision_tower:
        notes.append("freeze_vision_tower was measured with the vision tower run without autograd (its parameters "
                     "frozen). TrainingArguments has no such setting: set `requires_grad_(False)` on the tower and "
                     "run it under `torch.no_grad()`, or keep LoRA off its layers.")
    return notes


def loop_settings(job: Job, knobs: Knobs) -> dict[str, Any]:
    """The best config of a plain PyTorch loop (model=mlp), in the names of the calls that take it."""
    dtype = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}.get(knobs.precision)
    return {"DataLoader": {"batch_size": knobs.per_device_train_batch_size,
                           "num_workers": knobs.dataloader_num_workers, "pin_memory": knobs.dataloader_pin_memory},
            "gradient_accumulation_steps": knobs.accumulation(job.effective_batch),
            "torch.autocast": {"dtype": dtype} if dtype else None,
            "torch.backends.cuda.matmul.allow_tf32": knobs.precision == "tf32",
            "torch.compile": knobs.torch_compile,
            "torch.optim.AdamW": {"fused": knobs.optim == "adamw_torch_fused"}}


def _remeasure_command(job: Job, knobs: Knobs) -> str:
    """autotune measuring the best config again: the MLP has no trainer command to hand over."""
    words = ["autotune", "tune", f"{job.run}-best", f"model={job.model}", f"mlp_width={job.mlp_width}",
             f"mlp_depth={job.mlp_depth}", f"mlp_rows={job.mlp_rows}", f"max_len={job.max_len}",
             f"effective_batch={job.effective_batch}"]
    words += [f"{name}={str(value).lower() if isinstance(value, bool) else value}"
              for name, value in knobs.to_dict().items() if name in MLP_KNOBS]
    return shlex.join([*words, "max_trials=1"])


def best_config(job: Job, knobs: Knobs, script: Any = None, vlm: str | None = None,
                handover: dict[str, Any] | None = None, folder_path: Any = None) -> dict[str, Any]:
    """What best_config.json holds; for a Hugging Face text job, `handover`: the best file's keyword
    arguments (`kwargs`) and the realized line (`summary`), and `folder_path`: where the files are."""
    if job.is_mlp:
        return {"schema_version": 1, "knobs": knobs.to_dict(), "pytorch_loop": loop_settings(job, knobs),
                "command": _remeasure_command(job, knobs), "caveats": []}
    if script is not None:
        # The user's own files say the config: which keys to set, and the command with its flags.
        import shlex

        edits, flags = script.edits(knobs)
        words = ["python", job.script, *shlex.split(job.script_args), *flags]
        return {"schema_version": 1, "knobs": knobs.to_dict(), "config_edits": {
            label: {".".join(path): value for path, value in changes} for label, changes in edits.items()},
            "command": " ".join(shlex.quote(w) for w in words), "caveats": []}
    from pathlib import Path

    from ..workloads.hf.export import FILES, command, fallback_configs, python_kwargs

    folder_path = Path(folder_path) if folder_path is not None else Path("runs") / job.run
    if handover is None:  # the settings alone, no files (the installed SFTConfig's names: imports trl)
        handover = {"kwargs": python_kwargs(fallback_configs(job, knobs.to_dict(), job.smoke, folder_path.resolve())),
                    "summary": ""}
    kwargs = handover["kwargs"]
    return {"schema_version": 1, "knobs": knobs.to_dict(), "files": {k: str(folder_path / v) for k, v in FILES.items()},
            **kwargs, "realized": handover["summary"], "command": command(folder_path / FILES["best"]),
            "caveats": caveats(knobs, vlm)}


def _vlm_type(folder: RunFolder) -> str | None:
    """The model type when the run's frame found a vision tower (None for a text model or no frame yet)."""
    if not folder.frame.exists():
        return None
    model = json.loads(folder.frame.read_text()).get("model") or {}
    return model.get("model_type") if model.get("vision") else None


def write_best_config(folder: RunFolder, job: Job, knobs: Knobs, script: Any = None) -> dict[str, Any]:
    """best_config.json; for a Hugging Face text job also baseline_config.yaml and best_config.yaml, the
    files the hand-over step ran (realized.json): its best when TRL refused the loop's."""
    handover = None
    if not job.is_mlp and script is None:
        from . import realize
        from ..workloads.hf.export import write_files

        record = realize.read(folder)
        if record and record.get("best_knobs"):
            knobs = Knobs.from_dict(record["best_knobs"])
        frame = json.loads(folder.frame.read_text()) if folder.frame.exists() else {}
        cpu = (frame.get("device") or {}).get("kind") != "cuda"
        handover = {"kwargs": write_files(folder, job, knobs.to_dict(), record, cpu), "summary": realize.summary(record)}
    config = best_config(job, knobs, script, _vlm_type(folder), handover, folder.path)
    write_json_atomic(folder.best, config)
    return config


def _breakdown_line(label: str, shares: dict[str, Any] | None) -> str:
    if not shares:
        return f"- {label}: no profiled step"
    phases = ", ".join(f"{p.replace('_', ' ')} {shares[f'{p}_share']:.0%}"
                       for p in ("data_wait", "forward", "backward", "optimizer", "other"))
    return (f"- {label}: {phases}; idle {shares['idle_share']:.0%}; padding {shares['padding_share']:.0%} "
            f"of tokens ({shares['step_s'] * 1000:.0f} ms per step)")


def _frame_lines(frame: dict[str, Any]) -> list[str]:
    device, model, data = frame["device"], frame["model"], frame["data"]
    memory = device.get("memory_bytes", 0) / 2**30
    speeds = ", ".join(f"{k} {v:.3g}" for k, v in device.get("matmul_tflops", {}).items())
    peaks = device.get("peaks", {})
    bandwidth = peaks.get("copy_bytes_per_s", 0) / 1e9
    ceiling = frame.get("ceiling")
    lines = [
        f"- device: {device['kind']} {device.get('name', '')}, {memory:.1f} GiB; measured matmul TFLOP/s: {speeds}; "
        f"copy {bandwidth:.1f} GB/s (read + write){' (cached peaks)' if peaks.get('cached') else ''}",
        f"- software: torch {device.get('torch')}, transformers {device.get('transformers')}, "
        f"python {device.get('python')}",
    ]
    if model.get("model_type") == "mlp":
        lines += [f"- model: {model['source']}: {model['params']:,} parameters, {model['layers']} hidden layers of "
                  f"{model['hidden']}",
                  f"- data: {data['rows_available']:,} seeded random rows of {data['p50_len']} features"]
    elif "source" in model:
        lines += [
            f"- model: {model['source']}: {model['model_type']}, {model['params']:,} parameters "
            f"({model['trainable_params']:,} trainable), {model['layers']} layers, hidden {model['hidden']}, "
            f"vocab {model['vocab']}",
            f"- data: {data['dataset']}: median {data['p50_len']} tokens (p10 {data['p10_len']}, p90 {data['p90_len']}, "
            f"max {data['max_seen_len']}); padding share at max_len {data['padding_share']:.0%}; "
            f"{data['truncated_share']:.0%} of rows truncated"]
    elif model:  # a user's script: what its baseline's hooks saw
        share = data.get("padding_share")
        lines += [f"- model (seen by the hooks): {model.get('model_type')}, {model.get('params', 0):,} parameters "
                  f"({model.get('trainable_params', 0):,} trainable)",
                  f"- data (seen by the hooks): padding is {share:.0%} of the tokens the model ran"
                  if share is not None else "- data: the hooks saw no padding mask"]
    if ceiling:
        lines.append(f"- memory ceiling of the baseline: worst-case batch peaks at {ceiling['bytes'] / 2**30:.2f} GiB "
                     f"of a {ceiling['limit_bytes'] / 2**30:.2f} GiB limit ({ceiling['kind']})")
    lines.append(_breakdown_line("where the baseline's time goes", frame.get("breakdown")))
    return lines


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _belief_lines(records: list[dict[str, Any]]) -> list[str]:
    """Why each change was tried (the claims behind it), and what each outcome did to the beliefs."""
    lines = ["", "## Why each change was tried, and what it taught", ""]
    for r in records:
        hypothesis = r.get("hypothesis")
        if not hypothesis:
            continue
        lines.append(f"- trial {r['trial']} `{r['change']}`: P(helps) {hypothesis['p_helps']:.2f}, expected "
                     f"x{hypothesis['expected_ratio']:.2f}; {hypothesis['rationale']}")
        for event in r.get("beliefs") or []:
            children = f" into {', '.join(event['children'])}" if event.get("children") and event["op"] == "split" else ""
            lines.append(f"  - {event['op']} `{event['claim']}`{children}: {event['reason']}")
    return lines if len(lines) > 3 else []


def _chain_interval(records: list[dict[str, Any]]) -> str:
    """The kept changes' intervals multiplied: a wider range than a joint interval, never a narrower one."""
    kept = [r for r in records if r["decision"] == "keep"]
    if not kept or any(not r.get("interval") for r in kept):
        return ""
    low = high = 1.0
    for r in kept:
        low, high = low * r["interval"][0], high * r["interval"][1]
    return f", interval [{low:.2f}, {high:.2f}] (the kept changes' 95% intervals multiplied)"


def _change_cell(record: dict[str, Any]) -> str:
    if not record["change"]:
        return "baseline"
    proposer = (record.get("hypothesis") or {}).get("source")
    return f"`{record['change']}`" + {"llm": " (LLM)", "warm_start": " (warm start)", "warm_check": " (warm-start check)", "pooled": " (pooled)"}.get(proposer, "")


def _llm_lines(calls: list[dict[str, Any]], job: Job) -> list[str]:
    """What the LLM proposer was asked, what it said that was used, and what was rejected and why."""
    if not calls:
        return []
    lines = ["", f"## LLM proposer (`{job.llm or calls[0]['model']}`)", "",
             "Its proposals were checked against the schema, the catalog and this device before anything was "
             "tried; nothing it wrote was executed. Its claims start at low confidence.", ""]
    for call in calls:
        head = f"- before trial {call['before_trial']} ({call['latency_s']:.1f} s): "
        if call["state"] == "failed":
            lines.append(head + f"failed, the ranking was used: {call['error']}")
            continue
        accepted = ", ".join(f"`{a['change']}`" for a in call["accepted"]) or "no usable change"
        claims = f"; new claims {', '.join(f'`{c}`' for c in call['claims'])}" if call["claims"] else ""
        lines.append(head + f"proposed {accepted}{claims}")
        for rejected in call["rejected"]:
            item = rejected["item"][:120].replace("`", "'")  # a backtick would end the code span early
            lines.append(f"  - rejected `{item}`: {rejected['reason']}")
    return lines


def _other_card(outcome: Any) -> str:
    """Where the best config's speed was measured, when that is not the baseline's GPU: the two speeds are
    then two cards', and only the speed-up (same-card ratios) compares them."""
    best = next((r for r in outcome.records if r["trial"] == outcome.best.trial), None)
    here, there = (outcome.records[0].get("placement"), best.get("placement")) if best else (None, None)
    if not here or not there or _where(here) == _where(there):
        return ""
    return f", on {_where(there)}; the baseline on {_where(here)}"


def _where(placement: dict[str, Any] | None) -> str:
    """A record's node and GPU: `address/node-id GPU n` (several nodes may share one address)."""
    if not placement:
        return "-"
    node = placement.get("node", "?") + (f"/{placement['node_id'][:6]}" if placement.get("node_id") else "")
    return f"{node} GPU {placement.get('gpu') or '?'}"


def _parallel_lines(parallel: dict[str, Any] | None, records: list[dict[str, Any]]) -> list[str]:
    """How trials shared the GPUs, and the wall time a serial run on one of them would have taken more."""
    if not parallel:
        return []
    model = next((r["placement"].get("model") for r in records if r.get("placement")), "?")
    lost = parallel["slots"] - parallel["slots_left"]
    return [f"- parallel: trials on {parallel['slots']} GPUs of model {model}"
            + (f" ({lost} lost during the run)" if lost else "")
            + f"; the trials' runs took {parallel['device_s']:.0f}s one after another and the loop waited "
            f"{parallel['waited_s']:.0f}s for them: about **{parallel['saved_s']:.0f}s saved** against a serial run "
            f"(loop {parallel['loop_s']:.0f}s); runs replayed from speculation {parallel['replayed']}, run at "
            f"commit {parallel['live']}, thrown away {parallel['thrown_away']} (made for an incumbent a kept change "
            "replaced)"]


def compile_cost_s(measurement: dict[str, Any]) -> float | None:
    """Seconds a run spent before its timed steps beyond what as many steady steps take: compilation
    (and the first steps' warm-up), which the timing leaves out and the user pays once per run."""
    warmup, step = measurement.get("warmup_times_s") or [], measurement.get("median_step_s")
    return max(0.0, sum(warmup) - len(warmup) * step) if warmup and step else None


def _compile_lines(records: list[dict[str, Any]]) -> list[str]:
    rows = []
    for r in records:
        if "torch_compile" not in (r.get("change") or "") or not r["measurements"]:
            continue
        costs = [c for c in (compile_cost_s(m) for m in r["measurements"]) if c is not None]
        if costs:
            rows.append(f"- #{r['trial']} `{r['change']}`: {median(costs):.1f} s per run before the timed steps "
                        f"(compilation and warm-up, median of {len(costs)} runs), out of the samples/s")
    return ["", "## Compile time, out of the timing", ""] + rows if rows else []


def _realized_lines(config: dict[str, Any]) -> list[str]:
    """The realized speed-up in `trl sft` beside the loop's, with how it was measured."""
    if not config.get("realized"):
        return []
    return [f"- {config['realized']}; each file ran N and 2N optimizer steps in `trl sft`, baseline and best in "
            "turn on the run's rows, and its speed is N steps' rows over the difference of TRL's train_runtime "
            "(start-up and compilation cancel out)" if "**x" in config["realized"] else f"- {config['realized']}"]


def write_report(folder: RunFolder, job: Job, outcome: Any, config: dict[str, Any]) -> None:
    baseline = outcome.baseline["samples_per_s"]
    best = outcome.best_speed
    lines = [f"# autotune run `{job.run}`", "",
             f"Job: model `{job.model}`, dataset `{job.dataset}`, max_len {job.max_len}, "
             f"effective_batch {job.effective_batch}, method {job.method}, host {job.host}"
             + (", smoke (CPU dry run)" if job.smoke else "")
             + (f"; only {', '.join(job.only)} may change" if job.only else "") + ".", "", "## Frame", ""]
    lines += _frame_lines(outcome.frame)
    if outcome.frame.get("script"):
        lines += ["", "## Your script", "", f"`{job.script}` with {', '.join(job.script_configs) or 'no config file'}; "
                  "found (file:key or flag = value -> what it sets):", ""]
        lines += [f"- {line}" for line in outcome.frame["script"]]
    lines += ["", "## Result", "",
              f"- baseline: {baseline:.3f} samples/s (A/A noise floor {outcome.noise_floor:.2%})",
              f"- best: {best:.3f} samples/s (trial {outcome.best.trial}{_other_card(outcome)}), "
              f"**x{outcome.speedup:.2f}** the baseline by the chain of interleaved comparisons of the kept changes"
              + _chain_interval(outcome.records),
              f"- stopped: {outcome.stop_reason}; {len(outcome.records) - 1} trials in {outcome.wall_s:.0f}s"] + _realized_lines(config)
    lines += _parallel_lines(getattr(outcome, "parallel", None), outcome.records) + ["", "## Plots", ""]
    from .plots import write_plots

    lines += [f"![{path.stem}]({path.name})" for path in write_plots(folder.path, outcome)]
    placed = any(r.get("placement") for r in outcome.records)
    lines += ["", "## Trials", "",
              "| # | change | state | decision | samples/s | tokens/s | MFU | HFU | ratio [interval] | peak MiB | reason |"
              + (" where |" if placed else ""), "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if placed else "")]
    for r in outcome.records:
        peak = r.get("peak_memory_bytes")
        last = r["measurements"][-1] if r["measurements"] else {}
        interval = r.get("interval")
        ratio = (f"{r['ratio']:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]" if r["ratio"] and interval
                 else _fmt(r["ratio"], 3))
        lines.append("| " + " | ".join(_fmt(c, 2) for c in (
            r["trial"], _change_cell(r), r["state"], r["decision"],
            r["samples_per_s"], r.get("tokens_per_s"), _percent(last.get("mfu")), _percent(last.get("hfu")), ratio,
            peak / 2**20 if peak else None, r["reason"].replace("|", "/"))) + " |"
            + (f" {_where(r.get('placement'))} |" if placed else ""))
    lines += _compile_lines(outcome.records)
    lines += _belief_lines(outcome.records)
    lines += _llm_lines(folder.read_llm_calls(), job)
    best_breakdown = (outcome.best_measurement or {}).get("breakdown")
    lines += ["", "## Where the time goes", "", _breakdown_line("baseline", outcome.frame.get("breakdown")),
              _breakdown_line("best", best_breakdown)]
    if outcome.skipped:
        lines += ["", "## Not tried on this device or install", ""]
        lines += [f"- `{change}`: {why}" for change, why in outcome.skipped]
    if "config_edits" in config:
        lines += ["", "## Best config", "", "Set in your files (nothing was changed there):", ""]
        lines += [f"- `{label}`: " + ", ".join(f"`{key}: {value}`" for key, value in edits.items())
                  for label, edits in config["config_edits"].items()] or ["- no file edit"]
        lines += ["", "Ready to run:", "", "```bash", config["command"], "```"]
    elif "pytorch_loop" in config:
        lines += ["", "## Best config", "", "Settings of a plain PyTorch loop:", "", "```python"]
        lines += [f"{call}: {value}" for call, value in config["pytorch_loop"].items()]
        lines += ["```", "", "Measure it again:", "", "```bash", config["command"], "```"]
    else:
        lines += ["", "## Best config", "", f"`{config['files']['best']}` (the baseline's: "
                  f"`{config['files']['baseline']}`), and the same as keyword arguments:", "", "```python",
                  f"SFTConfig(**{config['sft_config']})",
                  f"AutoModelForCausalLM.from_pretrained({config['model']!r}, **{config['from_pretrained']})"]
        if "lora_config" in config:
            lines.append(f"peft.LoraConfig(**{config['lora_config']})")
        lines += ["```", "", "Ready to run:", "", "```bash", config["command"], "```"]
    lines += [f"\nNote: {note}" for note in config["caveats"]]
    folder.report.write_text("\n".join(lines) + "\n")
