"""Seed 002 (Oz et al., "Regression-Based Prediction for Task-Based Program Performance"):
log-transformed linear regression families with ANOVA-screened interactions (section 3.4).

Factors: the quantitative ones that vary in the data enter as logs, in the order
``log(I)`` (input size), ``log(T)`` (cores/threads), ``log(F)`` (frequency, our addition);
the categorical ones come from the ``variant`` column (``"k=v;k=v"`` gives one factor per key,
any other text one factor ``variant``) and enter with treatment contrasts (first level =
baseline), as R's ``factor()`` does. The response is ``log(time)``; fits are ordinary least
squares. Type-I (sequential) ANOVA follows R's ``anova(lm(...))``: terms in formula order, main
effects, then 2-factor, 3-factor, ... interactions; a column that is a linear combination of
earlier ones is aliased (dropped) exactly as R reports ``NA`` coefficients.

Differences from the paper, on purpose: the paper's ANOVA uses a repeated-measures error stratum
(``Error(subject/...)``); we use the plain residual error. modelAov/modelAov2 keep every main
effect (hierarchy) and add the interactions whose ``Pr(>F)`` is below ``alpha`` (0.05) in the
ANOVA of the all-interactions model.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations, product
from typing import Any, Sequence

import numpy as np
from scipy import stats

from .base import FittedModel, Modeler, NotEnoughData, Observations, Prediction, fit_quality

# quantitative factors: label, Observations attribute (order = the paper's formula order)
_QUANT = (("log(I)", "input_size"), ("log(T)", "cores"), ("log(F)", "freq_mhz"))
_ALIAS_TOL = 1e-7


# ----------------------------------------------------------------------------- factors


def variant_factors(variant: Any, n: int) -> dict[str, np.ndarray]:
    """Categorical factors from the variant column: ``"k=v;k=v"`` -> one factor per key,
    plain text -> one factor ``variant``. Missing keys/values become the level ``""``."""
    if variant is None:
        return {}
    texts = ["" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v).strip()
             for v in np.asarray(variant, dtype=object).ravel()]
    if len(texts) != n:
        raise ValueError(f"variant has {len(texts)} entries, expected {n}")
    nonempty = [t for t in texts if t]
    if nonempty and all("=" in t for t in nonempty):
        parsed = []
        for t in texts:
            kv = {}
            for part in filter(None, (p.strip() for p in t.split(";"))):
                k, _, v = part.partition("=")
                kv[k.strip()] = v.strip()
            parsed.append(kv)
        keys = sorted({k for kv in parsed for k in kv})
        return {k: np.array([kv.get(k, "") for kv in parsed], dtype=object) for k in keys}
    return {"variant": np.array(texts, dtype=object)}


@dataclass
class _Factor:
    label: str                 # "log(T)" or "factor(sched)"
    kind: str                  # "quant" | "cat"
    source: str                # Observations attribute or variant key
    levels: tuple = ()         # categorical levels seen in training (first = baseline)

    def block(self, obs: Observations, cat: dict[str, np.ndarray]) -> tuple[np.ndarray, list[str], np.ndarray]:
        """Columns of this factor for ``obs``, their names, and which rows are valid."""
        n = len(obs)
        if self.kind == "quant":
            raw = getattr(obs, self.source)
            x = np.full(n, np.nan) if raw is None else np.asarray(raw, float)
            ok = np.isfinite(x) & (x > 0)
            col = np.where(ok, np.log(np.where(ok, x, 1.0)), 0.0)
            return col[:, None], [self.label], ok
        vals = cat.get(self.source, np.full(n, "", dtype=object))
        ok = np.isin(vals, np.array(self.levels, dtype=object))
        cols = np.stack([(vals == lv).astype(float) for lv in self.levels[1:]], axis=1)
        return cols, [f"{self.label}{lv}" for lv in self.levels[1:]], ok


def _factors(obs: Observations) -> list[_Factor]:
    """Factors that vary in ``obs`` (quantitative ones must be finite and positive)."""
    out = []
    for label, attr in _QUANT:
        x = getattr(obs, attr)
        if x is None:
            continue
        x = np.asarray(x, float)
        if np.all(np.isfinite(x)) and np.all(x > 0) and np.unique(x).size >= 2:
            out.append(_Factor(label, "quant", attr))
    for key, vals in variant_factors(obs.variant, len(obs)).items():
        levels = tuple(sorted(set(vals.tolist())))
        if len(levels) >= 2:
            out.append(_Factor(f"factor({key})", "cat", key, levels))
    return out


# Term: tuple of (factor index, power); power 2 only for modelQuad's squared terms.
Term = tuple[tuple[int, int], ...]


def _term_label(term: Term, factors: Sequence[_Factor]) -> str:
    parts = []
    for i, pw in term:
        lab = factors[i].label
        parts.append(f"I({lab}^2)" if pw == 2 else lab)
    return ":".join(parts)


# ----------------------------------------------------------------------- term sets (sec 3.4.2)


def terms_log(factors: Sequence[_Factor]) -> list[Term]:
    """modelLog: main factors only."""
    return [((i, 1),) for i in range(len(factors))]


def terms_quad(factors: Sequence[_Factor]) -> list[Term]:
    """modelQuad: main factors plus the square of each quantitative factor (log(x))^2,
    placed right after its linear term as in the paper's formula."""
    out: list[Term] = []
    for i, f in enumerate(factors):
        out.append(((i, 1),))
        if f.kind == "quant":
            out.append(((i, 2),))
    return out


def terms_upto(factors: Sequence[_Factor], order: int) -> list[Term]:
    """Main factors plus all interactions up to ``order`` factors (model2: 2, modelAll: all)."""
    idx = range(len(factors))
    return [tuple((i, 1) for i in combo) for k in range(1, order + 1)
            for combo in combinations(idx, k)]


# ------------------------------------------------------------------------------ design


def _design(obs: Observations, factors: Sequence[_Factor], terms: Sequence[Term]
            ) -> tuple[np.ndarray, list[str], list[int], np.ndarray]:
    """Model matrix (intercept first), column names, term index per column (-1 = intercept),
    rows valid for every factor."""
    n = len(obs)
    cat = variant_factors(obs.variant, n) if obs.variant is not None else {}
    blocks = [f.block(obs, cat) for f in factors]
    ok = np.ones(n, bool)
    for _, _, v in blocks:
        ok &= v
    cols, names, owner = [np.ones(n)], ["(Intercept)"], [-1]
    for t, term in enumerate(terms):
        parts = []
        for i, pw in term:
            c, nm, _ = blocks[i]
            if pw == 2:
                c, nm = c ** 2, [f"I({x}^2)" for x in nm]
            parts.append((c, nm))
        # row-wise Kronecker product of the factors' column blocks
        for combo in product(*[range(p[0].shape[1]) for p in parts]):
            col = np.ones(n)
            for (c, _), j in zip(parts, combo):
                col = col * c[:, j]
            cols.append(col)
            names.append(":".join(p[1][j] for p, j in zip(parts, combo)))
            owner.append(t)
    return np.column_stack(cols), names, owner, ok


def _sequential_qr(X: np.ndarray, y: np.ndarray) -> tuple[list[int], np.ndarray]:
    """Columns kept in order (a column that adds no new direction is aliased) and the
    effects q_j'y of the kept columns; sum of squared effects per term = type-I SS."""
    n = X.shape[0]
    Q = np.zeros((n, 0))
    kept, effects = [], []
    for j in range(X.shape[1]):
        v = X[:, j].astype(float).copy()
        norm0 = np.linalg.norm(v)
        if norm0 == 0:
            continue
        for _ in range(2):  # re-orthogonalise once for numerical stability
            v -= Q @ (Q.T @ v)
        nv = np.linalg.norm(v)
        if nv <= _ALIAS_TOL * norm0:  # R's lm uses a relative tolerance of 1e-7 too
            continue
        q = v / nv
        Q = np.column_stack([Q, q])
        kept.append(j)
        effects.append(float(q @ y))
    return kept, np.asarray(effects)


def anova_table(X: np.ndarray, y: np.ndarray, owner: Sequence[int], labels: Sequence[str]
                ) -> tuple[list[dict[str, Any]], list[int]]:
    """Type-I ANOVA rows (term, Df, Sum Sq, Mean Sq, F value, Pr(>F)) plus Residuals, as R's
    ``anova(lm())``; also the kept (non-aliased) column indices. Implements seed 002 eq. (8)
    generalised to sequential sums of squares."""
    kept, eff = _sequential_qr(X, y)
    n, rank = X.shape[0], len(kept)
    df_res = n - rank
    resid = y - X[:, kept] @ np.linalg.lstsq(X[:, kept], y, rcond=None)[0]
    sse = float(resid @ resid)
    mse = sse / df_res if df_res > 0 else float("nan")
    rows = []
    for t, lab in enumerate(labels):
        sel = [k for k, j in enumerate(kept) if owner[j] == t]
        if not sel:
            continue  # fully aliased term: R omits it from the table
        ss = float(np.sum(eff[sel] ** 2))
        df = len(sel)
        ms = ss / df
        if df_res > 0 and mse > 0:
            F = ms / mse
            p = float(stats.f.sf(F, df, df_res))
        elif df_res > 0:
            F, p = float("inf"), 0.0
        else:
            F, p = float("nan"), float("nan")
        rows.append({"term": lab, "Df": df, "Sum Sq": ss, "Mean Sq": ms, "F value": F, "Pr(>F)": p})
    rows.append({"term": "Residuals", "Df": df_res, "Sum Sq": sse, "Mean Sq": mse,
                 "F value": float("nan"), "Pr(>F)": float("nan")})
    return rows, kept


# ------------------------------------------------------------------------------ fitting


def _training_rows(obs: Observations) -> np.ndarray:
    t = np.asarray(obs.time_s, float)
    return np.isfinite(t) & (t > 0)


class RegressionFit(FittedModel):
    """An OLS fit of log(time) on a fixed term set; ``anova`` holds the type-I table."""

    def __init__(self, name: str, factors: list[_Factor], terms: list[Term], obs: Observations,
                 level: float = 0.9):
        self.name = name
        self.factors, self.terms, self.level = factors, terms, level
        self.term_labels = [_term_label(t, factors) for t in terms]
        X, names, owner, ok = _design(obs, factors, terms)
        y = np.log(obs.time_s)
        self.anova, kept = anova_table(X, y, owner, self.term_labels)
        self.df_resid = X.shape[0] - len(kept)
        if self.df_resid < 1:
            raise NotEnoughData(f"{name}: {len(kept)} parameters need more than {X.shape[0]} "
                                f"observations")
        self.kept = kept
        Xk = X[:, kept]
        self.coef = np.linalg.lstsq(Xk, y, rcond=None)[0]
        resid = y - Xk @ self.coef
        self.sigma2 = float(resid @ resid) / self.df_resid
        self.xtx_inv = np.linalg.pinv(Xk.T @ Xk)
        self.dropped = [names[j] for j in range(len(names)) if j not in set(kept)]
        self.params = {names[j]: float(c) for j, c in zip(kept, self.coef)}
        self.params["sigma_log"] = float(np.sqrt(self.sigma2))
        self.quality = fit_quality(obs.time_s, np.exp(Xk @ self.coef))
        ss_tot = float(np.sum((y - y.mean()) ** 2))
        self.quality["r2_log"] = 1.0 - float(resid @ resid) / ss_tot if ss_tot > 0 else 1.0

    def predict(self, query: Observations) -> Prediction:
        """Median time exp(x'b) with a t prediction interval on the log scale, transformed
        back (Bland & Altman, the paper's ref. 19). Rows with an unseen categorical level or a
        missing factor get NaN."""
        X, _, _, ok = _design(query, self.factors, self.terms)
        Xk = X[:, self.kept]
        mu = Xk @ self.coef
        var = self.sigma2 * (1.0 + np.einsum("ij,jk,ik->i", Xk, self.xtx_inv, Xk))
        half = stats.t.ppf(0.5 + self.level / 2, self.df_resid) * np.sqrt(np.maximum(var, 0))
        nan = np.where(ok, 1.0, np.nan)
        return Prediction(np.exp(mu) * nan, np.exp(mu - half) * nan, np.exp(mu + half) * nan,
                          self.level)

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["formula"] = "log(time) ~ " + (" + ".join(self.term_labels) or "1")
        d["anova"] = [dict(r) for r in self.anova]
        d["aliased"] = list(self.dropped)
        return d


class _RegressionModeler(Modeler):
    """Common checks and fitting; subclasses choose the terms."""
    name = ""
    min_rows = 3

    def __init__(self, level: float = 0.9):
        self.level = level

    def terms(self, factors: list[_Factor], obs: Observations) -> list[Term]:
        raise NotImplementedError

    def applicable(self, obs: Observations) -> str | None:
        use = _training_rows(obs)
        if use.sum() < self.min_rows:
            return f"needs at least {self.min_rows} runs with a positive time, has {int(use.sum())}"
        if not _factors(obs.subset(use)):
            return "no factor varies (input size, cores, frequency or variant)"
        return None

    def fit(self, obs: Observations) -> FittedModel:
        reason = self.applicable(obs)
        if reason:
            raise NotEnoughData(f"{self.name}: {reason}")
        obs = obs.subset(_training_rows(obs))
        factors = _factors(obs)
        return RegressionFit(self.name, factors, self.terms(factors, obs), obs, self.level)


class ModelLog(_RegressionModeler):
    """log(ET) ~ log(I) + log(T) + factor(S) + factor(C) (main factors only)."""
    name = "modelLog"

    def terms(self, factors, obs):
        return terms_log(factors)


class ModelQuad(_RegressionModeler):
    """modelLog plus (log x)^2 for each quantitative factor."""
    name = "modelQuad"

    def terms(self, factors, obs):
        return terms_quad(factors)


class Model2(_RegressionModeler):
    """Main factors plus every 2-factor interaction."""
    name = "model2"

    def terms(self, factors, obs):
        return terms_upto(factors, 2)


class ModelAll(_RegressionModeler):
    """Main factors plus all 2-, 3-, ..., k-factor interactions."""
    name = "modelAll"

    def terms(self, factors, obs):
        return terms_upto(factors, len(factors))


class ModelAov(_RegressionModeler):
    """Main factors plus the interactions that are significant (Pr(>F) < alpha) in the type-I
    ANOVA of the all-interactions model; ``max_order`` = 2 gives modelAov2."""
    name = "modelAov"
    max_order: int | None = None

    def __init__(self, level: float = 0.9, alpha: float = 0.05):
        super().__init__(level)
        self.alpha = alpha

    def terms(self, factors, obs):
        full = terms_upto(factors, len(factors))
        X, _, owner, _ = _design(obs, factors, full)
        # drop the highest orders until the screening model leaves residual degrees of freedom
        order = len(factors)
        while True:
            cand = [t for t in full if len(t) <= order]
            cols = [j for j, o in enumerate(owner) if o == -1 or len(full[o]) <= order]
            owner_c = [o if o == -1 else cand.index(full[o]) for o in (owner[j] for j in cols)]
            rows, _ = anova_table(X[:, cols], np.log(obs.time_s), owner_c,
                                  [_term_label(t, factors) for t in cand])
            if rows[-1]["Df"] > 0 or order == 1:
                break
            order -= 1
        self.screen_order = order
        significant = {r["term"] for r in rows[:-1] if r["Pr(>F)"] < self.alpha}
        keep = [t for t in cand if len(t) == 1
                or (_term_label(t, factors) in significant
                    and (self.max_order is None or len(t) <= self.max_order))]
        return keep


class ModelAov2(ModelAov):
    """Main factors plus the significant 2-factor interactions."""
    name = "modelAov2"
    max_order = 2


ALL_MODELERS = (ModelLog, ModelQuad, Model2, ModelAll, ModelAov, ModelAov2)


# ------------------------------------------------------------------ protocol (sec 3.4.3, 5)


def split_by_input(obs: Observations, n_train: int) -> tuple[np.ndarray, np.ndarray]:
    """Masks (train, validate): the ``n_train`` smallest input sizes train, larger ones
    validate, as in the paper's Table 3."""
    if obs.input_size is None:
        raise NotEnoughData("no numeric input sizes")
    sizes = np.unique(obs.input_size[np.isfinite(obs.input_size)])
    if sizes.size <= n_train:
        raise NotEnoughData(f"{sizes.size} input sizes; need more than {n_train}")
    train = np.isin(obs.input_size, sizes[:n_train])
    return train, np.isfinite(obs.input_size) & ~train


def select_and_validate(train: Observations, validate: Observations,
                        modelers: Sequence[Modeler] | None = None,
                        criterion: str = "mape") -> dict[str, Any]:
    """Seed 002's flow (Fig. 3): fit every model on the training data, choose the one with the
    lowest training error (``criterion``: rmse, mae or mape), and report every model's error on
    the validation data (larger inputs) too. Models that cannot be fitted are listed with the
    reason."""
    modelers = list(modelers) if modelers is not None else [m() for m in ALL_MODELERS]
    out: dict[str, Any] = {"train": {}, "validation": {}, "skipped": {}, "chosen": None}
    vmask = _training_rows(validate)
    for m in modelers:
        try:
            fitted = m.fit(train)
        except NotEnoughData as exc:
            out["skipped"][m.name] = str(exc)
            continue
        out["train"][m.name] = dict(fitted.quality)
        pred = fitted.predict(validate.subset(vmask)).value
        out["validation"][m.name] = fit_quality(validate.time_s[vmask], pred)
    if out["train"]:
        out["chosen"] = min(out["train"], key=lambda k: out["train"][k][criterion])
    return out
