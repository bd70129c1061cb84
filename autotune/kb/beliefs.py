"""The belief graph: claims as nodes, lineage and relations as edges. The only module that imports networkx.

What is believed is folded from three sources, in order: the shipped priors (`priors.json`), the claim
definitions in the store's `claims` table (learned, split or imported claims), and the events of the
`claim_history` table (evidence that confirmed or weakened a claim, splits, deletions). Definitions are
written once and events only appended, so two tuners sharing a folder never overwrite each other.

`Beliefs.apply(updates)` is the only mutator: it writes the new definitions and events to the store,
then folds them into the graph held in memory. The reasoner proposes updates; it never applies them.

Edges: `split_from` (child -> parent claim), `enables` and `conflicts` (claim -> the change it speaks
of, a node named like `per_device_train_batch_size=up`).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Iterable, cast

import networkx as nx

from ..config.types import JsonValue, KnobValue
from ..util.errors import RecordError
from .claims import Claim, Evidence, Update
from .features import FeatureView
from .rows import BeliefsExport, ClaimDefinition, ClaimEvent
from .store import Store

PRIORS = "priors.json"
# What makes two events the same (an event repeated is folded once): op, claim, evidence's experiment, children.
EventKey = tuple[str, str, JsonValue, tuple[str, ...]]


def load_priors() -> list[Claim]:
    text = resources.files("autotune.kb").joinpath(PRIORS).read_text()
    data = json.loads(text)
    return [Claim.from_definition(entry) for entry in data["claims"]]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Beliefs:
    """The claims of one knowledge-base folder (or of the priors alone, with `store=None`)."""

    def __init__(self, store: Store | None = None, priors: Iterable[Claim] | None = None) -> None:
        self.store = store
        self._claims: dict[str, Claim] = {}
        self._history: list[ClaimEvent] = []
        self._seen_events: set[EventKey] = set()
        self._pending: dict[str, list[Evidence]] | None = None
        for claim in (load_priors() if priors is None else priors):
            self._claims.setdefault(claim.id, claim)
        if store is not None:
            # The store checked every record against its schema; beliefs.py wrote them in these shapes.
            for definition in store.view("claims"):
                claim = Claim.from_definition(definition)
                self._claims.setdefault(claim.id, claim)
            # Evidence is gathered per claim and attached once (10,000 events in well under a second).
            self._pending = {}
            for event in cast("list[ClaimEvent]", store.view("claim_history")):
                self._fold(event)
            self._flush()
        self._pending = None

    # -- reading ----------------------------------------------------------------------------
    def claims(self, active_only: bool = True) -> list[Claim]:
        return [c for c in self._claims.values() if c.active or not active_only]

    def get(self, claim_id: str) -> Claim:
        if claim_id not in self._claims:
            raise KeyError(claim_id)
        return self._claims[claim_id]

    def __contains__(self, claim_id: str) -> bool:
        return claim_id in self._claims

    def history(self, claim_id: str | None = None) -> list[ClaimEvent]:
        """Events in the order they were applied; for one claim, also those that created it."""
        if claim_id is None:
            return list(self._history)
        return [e for e in self._history if e["claim"] == claim_id or claim_id in e.get("children", ())]

    def matching(self, knob: str, value: KnobValue, start: KnobValue, features: FeatureView) -> list[Claim]:
        return [c for c in self._claims.values() if c.active and c.matches(knob, value, start, features)]

    def relations(self, kind: str) -> list[tuple[Claim, str]]:
        """(claim, change) pairs of active claims with a relation of this kind (enables, conflicts): the
        graph's edges of that kind."""
        return [(self._claims[claim], change) for claim, change, data in self.graph.edges(data=True)
                if data["kind"] == kind and self._claims[claim].active]

    @property
    def graph(self) -> "nx.DiGraph":
        graph = nx.DiGraph()
        for claim in self._claims.values():
            graph.add_node(claim.id, kind="claim", status=claim.status, change=claim.change,
                           direction=claim.direction, confidence=claim.confidence,
                           evidence=len(claim.evidence), origin=claim.origin)
        for claim in self._claims.values():
            if claim.parent and claim.parent in graph:
                graph.add_edge(claim.id, claim.parent, kind="split_from")
            for kind, change in claim.relations:
                graph.add_node(change, kind="change")
                graph.add_edge(claim.id, change, kind=kind)
        return graph

    @property
    def tree(self) -> "nx.DiGraph":
        """The claim tree: an edge from each split claim to the claim it was split from."""
        graph = self.graph
        return graph.edge_subgraph((u, v) for u, v, d in graph.edges(data=True) if d["kind"] == "split_from")

    def lineage(self, claim_id: str) -> list[str]:
        """The claim and its ancestors, oldest last (one parent each: the walk up the tree)."""
        tree = self.tree
        return list(nx.dfs_preorder_nodes(tree, claim_id)) if claim_id in tree else [claim_id]

    def children(self, claim_id: str) -> list[str]:
        """The claims split from this one, sorted."""
        tree = self.tree
        return sorted(tree.predecessors(claim_id)) if claim_id in tree else []

    # -- the one mutator ------------------------------------------------------------------------
    def apply(self, updates: Iterable[Update], run: str = "") -> list[ClaimEvent]:
        """Write the updates to the store (definitions first, then events) and fold them in.

        Returns the events applied; an update that repeats an event already folded (the same
        evidence for the same claim) is skipped.
        """
        definitions, events = self.plan(updates, run)
        if self.store is not None:
            self.store.extend_all({"claims": definitions, "claim_history": events})
        return self.fold(definitions, events)

    def plan(self, updates: Iterable[Update], run: str = "",
             define: Iterable[Claim] = ()) -> tuple[list[ClaimDefinition], list[ClaimEvent]]:
        """(new claim definitions, new events) that `apply` would write, writing nothing; `define`
        adds claims to write first (an import's), so its events may speak of them."""
        definitions = [c.definition() for c in define if c.id not in self._claims]
        events: list[ClaimEvent] = []
        batch: set[EventKey] = set()
        for update in updates:
            for child in update.children:
                if child.id not in self._claims and all(d["id"] != child.id for d in definitions):
                    definitions.append(child.definition())
            event: ClaimEvent = {"schema_version": 1, "op": update.op, "claim": update.claim, "reason": update.reason,
                     "evidence": update.evidence.to_dict() if update.evidence else None,
                     "children": [c.id for c in update.children], "run": run or update.run, "at": _now()}
            if self._event_key(event) in self._seen_events or self._event_key(event) in batch:
                continue  # folded already, or twice in this batch: written once
            batch.add(self._event_key(event))
            if update.claim not in self._claims and not any(d["id"] == update.claim for d in definitions):
                raise RecordError(f"belief update names an unknown claim {update.claim!r}")
            events.append(event)
        return definitions, events

    def fold(self, definitions: list[ClaimDefinition], events: list[ClaimEvent]) -> list[ClaimEvent]:
        """Take in definitions and events `plan` made once they are written; returns the events folded."""
        for definition in definitions:
            claim = Claim.from_definition(definition)
            self._claims.setdefault(claim.id, claim)
        applied = []
        for event in events:
            if self._fold(event):
                applied.append(event)
        return applied

    @staticmethod
    def _event_key(event: ClaimEvent) -> EventKey:
        evidence = event.get("evidence") or {}
        return (event["op"], event["claim"], evidence.get("experiment"), tuple(event.get("children") or ()))

    def _fold(self, event: ClaimEvent) -> bool:
        key = self._event_key(event)
        claim = self._claims.get(event["claim"])
        if key in self._seen_events or claim is None:
            return False
        self._seen_events.add(key)
        self._history.append(event)
        op, evidence = event["op"], event.get("evidence")
        if op in ("confirm", "weaken") and evidence:
            if self._pending is not None:
                self._pending.setdefault(claim.id, []).append(Evidence.from_dict(evidence))
            else:
                self._claims[claim.id] = claim.with_evidence(Evidence.from_dict(evidence))
            return True
        self._flush()
        claim = self._claims[claim.id]
        if op == "split":
            self._claims[claim.id] = _with_status(claim, "split", event["reason"])
            # The children inherit the parent's evidence that falls under their refined conditions.
            for child_id in event.get("children") or ():
                child = self._claims.get(child_id)
                if child is not None:
                    self._claims[child_id] = child.with_evidence(
                        *[e for e in claim.evidence if all(c.holds(e.features) for c in child.condition)])
        elif op == "delete":
            self._claims[claim.id] = _with_status(claim, "deleted", event["reason"])
        return True

    def _flush(self) -> None:
        if self._pending:
            for claim_id, evidence in self._pending.items():
                self._claims[claim_id] = self._claims[claim_id].with_evidence(*evidence)
            self._pending.clear()

    # -- sharing ----------------------------------------------------------------------------
    def export(self) -> BeliefsExport:
        """Everything learned here (not the shipped priors' definitions), for `kb import` elsewhere."""
        learned = [c.definition() for c in self._claims.values() if c.origin != "prior"]
        return {"schema_version": 1, "claims": learned, "claim_history": self.history()}


def _with_status(claim: Claim, status: str, reason: str) -> Claim:
    from dataclasses import replace

    return replace(claim, status=status, status_reason=reason)


def draw(beliefs: Beliefs, path: Path) -> Path:
    """A PNG of the graph: claims coloured by status, sized by evidence, lineage and relations as arrows."""
    from ..util.extras import need

    matplotlib = need("matplotlib", "drawing the belief graph")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graph = beliefs.graph.copy()
    # Each claim hangs from the change it speaks of, so claims about one change sit together.
    for node, data in list(graph.nodes(data=True)):
        if data["kind"] == "claim":
            graph.add_node(data["change"], kind="change")
            graph.add_edge(node, data["change"], kind="about")
    colours = {"active": "#4c9a2a", "split": "#999999", "deleted": "#c0392b"}
    layout = nx.spring_layout(graph, seed=0, k=2.0 / max(1, len(graph)) ** 0.5, iterations=200)
    figure, axes = plt.subplots(figsize=(14, 10))
    claims = [n for n, d in graph.nodes(data=True) if d["kind"] == "claim"]
    changes = [n for n, d in graph.nodes(data=True) if d["kind"] == "change"]
    nx.draw_networkx_nodes(graph, layout, nodelist=claims, ax=axes,
                           node_color=[colours[graph.nodes[n]["status"]] for n in claims],
                           node_size=[200 + 60 * graph.nodes[n]["evidence"] for n in claims],
                           alpha=[0.35 + 0.65 * graph.nodes[n]["confidence"] for n in claims])
    nx.draw_networkx_nodes(graph, layout, nodelist=changes, node_shape="s", node_color="#3b6fb6", ax=axes,
                           node_size=150)
    styles = {"about": ("solid", "#cccccc"), "split_from": ("solid", "black"), "enables": ("dashed", "#3b6fb6"),
              "conflicts": ("dotted", "#c0392b")}
    for kind, (style, colour) in styles.items():
        edges = [(u, v) for u, v, d in graph.edges(data=True) if d["kind"] == kind]
        nx.draw_networkx_edges(graph, layout, edgelist=edges, style=style, edge_color=colour, ax=axes,
                               arrows=kind != "about")
    labels = {n: (n if graph.nodes[n]["kind"] == "claim" else n) for n in graph}
    nx.draw_networkx_labels(graph, layout, labels=labels, font_size=7, ax=axes)
    axes.set_title("beliefs: claims (circles: green active, grey split, red deleted; size = evidence, opacity = "
                   "confidence) around the change they speak of (blue squares); black = split from, blue dashed = "
                   "enables, red dotted = conflicts", fontsize=9)
    axes.axis("off")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)
    return path
