"""Names of all time models and where they live; imported lazily so that a daemon without
scikit-learn still fits the analytic models."""

from __future__ import annotations

import importlib

from .base import Modeler

# name -> "module:factory" (factory() returns a Modeler)
MODELERS: dict[str, str] = {
    "amdahl": "amdahl:AmdahlModeler",
    "usl": "usl:USLModeler",
    "memwall": "memwall:MemWallModeler",
    "hold": "hold:HoldModeler",            # persistence baseline (last value held)
    "combo": "combine_modeler:CombineModeler",  # forecast combination (select rule "combine")
    "prior": "prior:PriorModeler",         # other workloads' curves (reload only; fit_prior)
    # seed 002 regression family
    "modelLog": "regression:ModelLog",
    "modelQuad": "regression:ModelQuad",
    "model2": "regression:Model2",
    "modelAll": "regression:ModelAll",
    "modelAov": "regression:ModelAov",
    "modelAov2": "regression:ModelAov2",
    # seed 003 section 4.3 learners over (cores, frequency)
    "krr": "learners:KRRModeler",
    "svr": "learners:SVRModeler",
    "dtree": "learners:DecisionTreeModeler",
    # seed 004 runtime-feature learners (counters + cores + frequency)
    "feat_svr": "learners:FeatureSVRModeler",
    "feat_rf": "learners:FeatureRFModeler",
    "feat_ridge": "learners:FeatureRidgeModeler",
}


def get(name: str) -> Modeler:
    """The modeler called ``name``; ValueError lists the known names."""
    try:
        spec = MODELERS[name]
    except KeyError:
        raise ValueError(f"unknown model '{name}'; known models: {', '.join(MODELERS)}") from None
    module, factory = spec.split(":")
    mod = importlib.import_module(f"{__package__}.{module}")
    return getattr(mod, factory)()


def available() -> list[str]:
    """Names whose module imports on this installation."""
    names = []
    for name, spec in MODELERS.items():
        try:
            importlib.import_module(f"{__package__}.{spec.split(':')[0]}")
        except ImportError:
            continue
        names.append(name)
    return names
