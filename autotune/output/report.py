"""What a user reads after a run: results.tsv, best_config.json (with a ready-to-run command), report.md."""

from __future__ import annotations

import json
from statistics import median
from typing import Any, Mapping, Sequence

from ..config.job import Job
from ..workloads.jobs import kind_of
from ..config.knobs import Knobs
from ..config.measurement import Measurement
from ..config.records import TrialRecord
from ..config.types import JsonObject, JsonValue
from .documents import LlmCall
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


def write_results_tsv(folder: RunFolder, records: Sequence[TrialRecord]) -> None:
    lines = ["\t".join(TSV_COLUMNS)]
    for r in records:
        peak = r.get("peak_memory_bytes")  # fields the typed view leaves in the stored record
        cells = (r.trial, r.change or "(baseline)", r.state, r.decision, r.samples_per_s,
                 r.get("tokens_per_s"), r.ratio, peak / 2**20 if peak else None, r.reason.replace("\t", " "))
        lines.append("\t".join(_fmt(c) for c in cells))
    folder.results.write_text("\n".join(lines) + "\n")


def best_config(job: Job, knobs: Knobs, script: Any = None, vlm: str | None = None,
                handover: JsonObject | None = None, folder_path: Any = None) -> JsonObject:
    """What best_config.json holds, in the form the job's kind gives it (workloads/jobs.py KINDS); for a
    Hugging Face text job, `handover`: the best file's keyword arguments (`kwargs`) and the realized line
    (`summary`), and `folder_path`: where the files are."""
    return kind_of(job).best(job, knobs, script=script, vlm=vlm, handover=handover, folder_path=folder_path)


def _vlm_type(folder: RunFolder) -> str | None:
    """The model type when the run's frame found a vision tower (None for a text model or no frame yet)."""
    if not folder.frame.exists():
        return None
    model = json.loads(folder.frame.read_text()).get("model") or {}
    return model.get("model_type") if model.get("vision") else None


def write_best_config(folder: RunFolder, job: Job, knobs: Knobs, script: Any = None) -> JsonObject:
    """best_config.json; for a Hugging Face text job also baseline_config.yaml and best_config.yaml, the
    files the hand-over step ran (realized.json): its best when TRL refused the loop's."""
    handover: JsonObject | None = None
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


def _breakdown_line(label: str, shares: JsonValue) -> str:
    """`shares`: a measurement's `breakdown` (probes' profile: each phase's share of a step, and step_s)."""
    if not shares or not isinstance(shares, Mapping):
        return f"- {label}: no profiled step"
    phases = ", ".join(f"{p.replace('_', ' ')} {shares[f'{p}_share']:.0%}"
                       for p in ("data_wait", "forward", "backward", "optimizer", "other"))
    return (f"- {label}: {phases}; idle {shares['idle_share']:.0%}; padding {shares['padding_share']:.0%} "
            f"of tokens ({shares['step_s'] * 1000:.0f} ms per step)")


def _frame_lines(frame: JsonObject) -> list[str]:
    """The frame's facts (loop.limits.Frame): what the device, model and data probes reported, an open set."""
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


def _belief_lines(records: Sequence[TrialRecord]) -> list[str]:
    """Why each change was tried (the claims behind it), and what each outcome did to the beliefs."""
    lines = ["", "## Why each change was tried, and what it taught", ""]
    for r in records:
        hypothesis = r.get("hypothesis")
        if not hypothesis:
            continue
        lines.append(f"- trial {r.trial} `{r.change}`: P(helps) {hypothesis['p_helps']:.2f}, expected "
                     f"x{hypothesis['expected_ratio']:.2f}; {hypothesis['rationale']}")
        for event in r.get("beliefs") or []:
            children = f" into {', '.join(event['children'])}" if event.get("children") and event["op"] == "split" else ""
            lines.append(f"  - {event['op']} `{event['claim']}`{children}: {event['reason']}")
    return lines if len(lines) > 3 else []


def _chain_interval(records: Sequence[TrialRecord]) -> str:
    """The kept changes' intervals multiplied: a wider range than a joint interval, never a narrower one."""
    intervals = [r.interval for r in records if r.decision == "keep"]
    if not intervals or any(not interval for interval in intervals):
        return ""
    low = high = 1.0
    for one_low, one_high in filter(None, intervals):
        low, high = low * one_low, high * one_high
    return f", interval [{low:.2f}, {high:.2f}] (the kept changes' 95% intervals multiplied)"


def _tree_lines(records: Sequence[TrialRecord]) -> list[str]:
    """How the trials' copies of the user's folder were made: none of them could change it."""
    trees: list[Any] = [m.rest["tree"] for r in records for m in r.measurements if m.rest.get("tree")]
    if not trees:
        return []
    methods = sorted({t["method"] for t in trees})
    return ["", f"Each trial ran on its own copy of your folder ({' and '.join(methods)}: {trees[-1]['files']} files, "
            f"{trees[-1]['bytes'] / 2 ** 20:.1f} MB); nothing the script wrote reached your files."]


def _change_cell(record: TrialRecord) -> str:
    if not record.change:
        return "baseline"
    proposer = record.source.value if record.source else None
    return f"`{record.change}`" + {"llm": " (LLM)", "warm_start": " (warm start)", "warm_check": " (warm-start check)", "pooled": " (pooled)"}.get(proposer, "")


def _llm_lines(calls: Sequence[LlmCall], job: Job) -> list[str]:
    """What the LLM proposer was asked, what it said that was used, and what was rejected and why."""
    if not calls:
        return []
    lines = ["", f"## LLM proposer (`{job.llm.model if job.llm else calls[0]['model']}`)", "",
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
    best = next((r for r in outcome.records if r.trial == outcome.best.trial), None)
    here, there = (outcome.records[0].placement, best.placement) if best else (None, None)
    if not here or not there or _where(here) == _where(there):
        return ""
    return f", on {_where(there)}; the baseline on {_where(here)}"


def _where(placement: Mapping[str, str] | None) -> str:
    """A record's node and GPU: `address/node-id GPU n` (several nodes may share one address)."""
    if not placement:
        return "-"
    node = placement.get("node", "?") + (f"/{placement['node_id'][:6]}" if placement.get("node_id") else "")
    return f"{node} GPU {placement.get('gpu') or '?'}"


def _parallel_lines(parallel: JsonObject | None, records: Sequence[TrialRecord]) -> list[str]:
    """How trials shared the GPUs, and the wall time a serial run on one of them would have taken more
    (`parallel`: Outcome.parallel, the figures loop/parallel.py keeps)."""
    if not parallel:
        return []
    model = next((r.placement.get("model") for r in records if r.placement), "?")
    lost = parallel["slots"] - parallel["slots_left"]
    return [f"- parallel: trials on {parallel['slots']} GPUs of model {model}"
            + (f" ({lost} lost during the run)" if lost else "")
            + f"; the trials' runs took {parallel['device_s']:.0f}s one after another and the loop waited "
            f"{parallel['waited_s']:.0f}s for them: about **{parallel['saved_s']:.0f}s saved** against a serial run "
            f"(loop {parallel['loop_s']:.0f}s); runs replayed from speculation {parallel['replayed']}, run at "
            f"commit {parallel['live']}, thrown away {parallel['thrown_away']} (made for an incumbent a kept change "
            "replaced)"]


def compile_cost_s(measurement: Measurement) -> float | None:
    """Seconds a run spent before its timed steps beyond what as many steady steps take: compilation
    (and the first steps' warm-up), which the timing leaves out and the user pays once per run."""
    # Figures the typed view carries as they were measured (`rest`): a list of seconds and a number.
    warmup, step = measurement.rest.get("warmup_times_s"), measurement.rest.get("median_step_s")
    if not (warmup and step and isinstance(warmup, list) and isinstance(step, (int, float))):
        return None
    return max(0.0, sum(float(t) for t in warmup if isinstance(t, (int, float))) - len(warmup) * step)


def _compile_lines(records: Sequence[TrialRecord]) -> list[str]:
    rows = []
    for r in records:
        if "torch_compile" not in (r.change or "") or not r.measurements:
            continue
        costs = [c for c in (compile_cost_s(m) for m in r.measurements) if c is not None]
        if costs:
            rows.append(f"- #{r.trial} `{r.change}`: {median(costs):.1f} s per run before the timed steps "
                        f"(compilation and warm-up, median of {len(costs)} runs), out of the samples/s")
    return ["", "## Compile time, out of the timing", ""] + rows if rows else []


def _realized_lines(config: Mapping[str, JsonValue]) -> list[str]:
    """The realized speed-up in `trl sft` beside the loop's, with how it was measured."""
    if not config.get("realized"):
        return []
    return [f"- {config['realized']}; each file ran N and 2N optimizer steps in `trl sft`, baseline and best in "
            "turn on the run's rows, and its speed is N steps' rows over the difference of TRL's train_runtime "
            "(start-up and compilation cancel out)" if "**x" in config["realized"] else f"- {config['realized']}"]


def write_report(folder: RunFolder, job: Job, outcome: Any, config: JsonObject) -> None:
    """report.md; `outcome`: the loop's Outcome, `config`: best_config.json's content (workloads' `best`)."""
    baseline = outcome.baseline["samples_per_s"]
    best = outcome.best_speed
    lines = [f"# autotune run `{job.run}`", "",
             f"Job: model `{job.model}`, dataset `{job.dataset}`, max_len {job.max_len}, "
             f"effective_batch {job.effective_batch}, method {job.method}, host {job.host}"
             + (", smoke (CPU dry run)" if job.smoke else "")
             + (f"; only {', '.join(job.only)} may change" if job.only else "") + ".", "", "## Frame", ""]
    lines += _frame_lines(outcome.frame)
    if outcome.frame.get("script"):
        lines += ["", "## Your script", "", f"`{job.script.path}` with {', '.join(job.script.configs) or 'no config file'}; "
                  "found (file:key or flag = value -> what it sets):", ""]
        lines += [f"- {line}" for line in outcome.frame["script"]] + _tree_lines(outcome.records)
    lines += ["", "## Result", "",
              f"- baseline: {baseline:.3f} samples/s (A/A noise floor {outcome.noise_floor:.2%})",
              f"- best: {best:.3f} samples/s (trial {outcome.best.trial}{_other_card(outcome)}), "
              f"**x{outcome.speedup:.2f}** the baseline by the chain of interleaved comparisons of the kept changes"
              + _chain_interval(outcome.records),
              f"- stopped: {outcome.stop_reason}; {len(outcome.records) - 1} trials in {outcome.wall_s:.0f}s",
              f"- device time: {outcome.device_runs} runs, {outcome.device_s:.0f}s (baseline included); "
              f"a change that could not be x{1 + job.min_gain:.2f} faster beyond the noise (min_gain) stopped being measured"
              ] + _realized_lines(config)
    lines += _parallel_lines(getattr(outcome, "parallel", None), outcome.records) + ["", "## Plots", ""]
    from ..util.extras import available, install_line
    from .plots import write_plots

    if available("matplotlib"):
        lines += [f"![{path.stem}]({path.name})" for path in write_plots(folder.path, outcome)]
    else:  # the report is still written: the plots are an extra
        lines += [f"Not drawn: matplotlib is not installed ({install_line('matplotlib')})."]
    placed = any(r.placement for r in outcome.records)
    lines += ["", "## Trials", "",
              "| # | change | state | decision | samples/s | tokens/s | MFU | HFU | ratio [interval] | peak MiB | reason |"
              + (" where |" if placed else ""), "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if placed else "")]
    for r in outcome.records:
        peak = r.get("peak_memory_bytes")
        last: Any = r.measurements[-1].rest if r.measurements else {}  # MFU and HFU: the measurement's own figures
        interval = r.interval
        ratio = (f"{r.ratio:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]" if r.ratio and interval
                 else _fmt(r.ratio, 3))
        lines.append("| " + " | ".join(_fmt(c, 2) for c in (
            r.trial, _change_cell(r), r.state, r.decision,
            r.samples_per_s, r.get("tokens_per_s"), _percent(last.get("mfu")), _percent(last.get("hfu")), ratio,
            peak / 2**20 if peak else None, r.reason.replace("|", "/"))) + " |"
            + (f" {_where(r.placement)} |" if placed else ""))
    lines += _compile_lines(outcome.records)
    lines += _belief_lines(outcome.records)
    lines += _llm_lines(folder.read_llm_calls(), job)
    best_breakdown = (outcome.best_measurement.breakdown if outcome.best_measurement else None)
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
