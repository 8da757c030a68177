"""The forecast combination as a modeler (registry name "combo"): fitted by ``select.choose``'s
rule "combine" (the members and weights it cross-validates), reloaded from a saved state.

Apart from combine.py (the combined model, which ``select`` builds) because it is a client of
``select``: in one module the two imported each other.
"""

from __future__ import annotations

from typing import Any

from . import registry, select
from .base import Modeler, Observations
from .combine import NAME, CombinedFit


class CombineModeler(Modeler):
    """The cross-validated combination of the analytic models as a model of its own."""
    name = NAME

    def __init__(self, candidates: tuple[str, ...] | None = None) -> None:
        self.candidates = candidates

    def fit(self, obs: Observations) -> CombinedFit:
        # k-fold weights (no target known here); a single winner becomes a one-member mix
        sel = select.choose(obs, list(self.candidates or select.ANALYTIC), rule="combine",
                            calibrate=False)
        if isinstance(sel.model, CombinedFit):
            return sel.model
        fit = CombinedFit([(sel.model, 1.0, None)])
        fit.set_quality(obs)
        return fit

    def from_state(self, state: dict[str, Any]) -> CombinedFit:
        """A combination back from ``CombinedFit.to_state()`` (for saved fits)."""
        members = []
        for m in state["members"]:
            modeler = registry.get(m["model"])
            for key, val in m["state"].get("options", {}).items():
                setattr(modeler, key, val)
            members.append((modeler.from_state(m["state"]), float(m["weight"]),
                            m.get("anchors")))
        fit = CombinedFit(members)
        fit.quality = dict(state.get("quality", {}))
        return fit
