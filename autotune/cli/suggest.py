"""`autotune suggest key=value ... [--json]`: the grammar and the printed advice (loop/advice.py advises)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..loop import advice as advising
from ..loop.advice import SUGGEST_KEYS
from ..loop.suggestion import Advice


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("suggest", help="advice for a job from the beliefs alone (no device needed)",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 usage="autotune suggest key=value ... [--json]",
                                 epilog="keys:\n" + "\n".join(f"  {k:<16} {v}" for k, v in SUGGEST_KEYS.items())
                                 + "\n  and any knob of the catalog as the starting config (default the naive one)"
                                 + "\n\nexample:\n  autotune suggest model=Qwen/Qwen2.5-7B method=lora max_len=4096 gpu=4090")
    parser.add_argument("words", nargs="*", metavar="key=value")
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    parser.set_defaults(handler=lambda args: run(args.words, args.json))


def run(words: list[str], as_json: bool) -> int:
    found = advising.advise(words)  # looked up when run: a test replaces it
    if as_json:
        print(json.dumps(found, indent=1))  # as advised, every field of each hypothesis included
        return 0
    advice = Advice.from_dict(found)
    from rich.table import Table

    from ..output.display import new_console, shown as plain

    console = new_console()
    shown = {k: advice.features[k] for k in ("params_m", "max_len", "effective_batch", "method", "gpu_mem_gb",
                                             "headroom") if k in advice.features}
    console.print(plain("job: " + ", ".join(f"{k}={v}" for k, v in shown.items())), highlight=False)
    table = Table(title="what to try, best first (from the beliefs; nothing measured)")
    for column in ("#", "change", "P(helps)", "ratio if it helps", "why"):
        table.add_column(column, overflow="fold")
    for n, change in enumerate(advice.changes, 1):
        why = change.rationale + (f" [sources: {'; '.join(change.sources)}]" if change.sources else "")
        table.add_row(str(n), plain(change.change), f"{change.p_helps:.2f}", f"x{change.expected_ratio:.2f}", plain(why))
    console.print(table)
    for item in advice.skipped:
        console.print(plain(f"cannot apply: {item.change}: {item.why}"), highlight=False)
    for note in advice.notes:
        console.print(plain(f"note: {note}"), highlight=False)
    return 0
