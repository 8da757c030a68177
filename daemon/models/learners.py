"""Machine-learning time models (scikit-learn stays inside this module).

(a) Seed 003 section 4.3: kernel ridge regression (KRR), support vector regression (SVR) and a
    decision tree over (cores, frequency), hyper-parameters by 3-fold grid search. KRR/SVR use
    the paper's RBF grids, C = {100, 1000}, alpha = {1, 0.1, 0.01, 0.001},
    gamma = {1e-5, ..., 1}; the paper gives no tree grid, ours is max_depth x min_samples_leaf.
    Features are standardised (the paper's gamma range presumes comparable scales), the
    target is log(time) minus its mean (KRR has no intercept).
(b) Seed 004 (SmartPred) section IV.B-C: runtime-feature learners. Features = counters plus
    cores and frequency; filtering drops counters that are invalid in a training row,
    duplicates (equal values in every row: keep the first) and zero-variance ones, ranks the
    rest by |Pearson r| with time and keeps the top m; every feature enters as a log
    (log1p for counters, which may be 0); target log(time). Learners: RBF SVR, random forest,
    ridge. The seed gives no hyper-parameters, so each has a small 3-fold grid (below).
    ``InputParamModeler`` is the seed's baseline over input parameters only (Table III
    "INPUT"), and ``compare_feature_sets`` reproduces the Table III comparison.

Every prediction interval comes from the 3-fold cross-validated residuals of the chosen
hyper-parameters on the log scale (their empirical quantiles added to the prediction).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
from sklearn.base import clone
from sklearn.ensemble import RandomForestRegressor
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, KFold, cross_val_predict
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVR
from sklearn.tree import DecisionTreeRegressor

from .base import FittedModel, Modeler, NotEnoughData, Observations, Prediction, fit_quality

GAMMAS_003 = [1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0]

MIN_ROWS = 6  # 3 folds with at least 2 rows each

# Extra CSV columns that the tidy reader also hands over as "counters" but that are meter
# readings, bookkeeping or hardware descriptors, not runtime features of the program: several
# are (nearly) the time itself (sample counts, run_avg_ms), so they would leak the target.
NOT_RUNTIME_FEATURES = ("power", "energy", "temp", "volt", "util", "n_samples",
                        "n_power_samples", "hw_", "run_", "freq", "threads", "cores", "speedup",
                        "powerup", "config_id", "rep")


def runtime_counters(counters: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The counters that are runtime features (see NOT_RUNTIME_FEATURES)."""
    return {k: v for k, v in counters.items()
            if not any(k.lower().startswith(p) for p in NOT_RUNTIME_FEATURES)}


def _estimator(kind: str) -> tuple[Any, dict[str, list]]:
    """Estimator and its grid (keys address the pipeline step 'est')."""
    if kind == "krr":      # seed 003 sec. 4.3
        return KernelRidge(kernel="rbf"), {"alpha": [1.0, 1e-1, 1e-2, 1e-3], "gamma": GAMMAS_003}
    if kind == "svr":      # seed 003 sec. 4.3; epsilon 0.01 in log(time) = 1 %
        return SVR(kernel="rbf", epsilon=0.01), {"C": [100.0, 1000.0], "gamma": GAMMAS_003}
    if kind == "dtree":    # grid ours (the seed gives none)
        return (DecisionTreeRegressor(random_state=0),
                {"max_depth": [2, 4, 6, None], "min_samples_leaf": [1, 2, 4]})
    if kind == "feat_svr":  # grids ours (seed 004 gives none)
        return SVR(kernel="rbf", epsilon=0.01), {"C": [1.0, 10.0, 100.0, 1000.0],
                                                  "gamma": ["scale", 0.01, 0.1, 1.0]}
    if kind == "feat_rf":
        return (RandomForestRegressor(n_estimators=50, random_state=0, n_jobs=1),
                {"max_features": [1.0, 0.5], "min_samples_leaf": [1, 3]})
    if kind == "feat_ridge":
        return Ridge(), {"alpha": [1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0]}
    raise ValueError(f"unknown learner {kind!r}")


def _good_time(obs: Observations) -> np.ndarray:
    t = np.asarray(obs.time_s, float)
    return np.isfinite(t) & (t > 0)


def _fit_search(kind: str, X: np.ndarray, y: np.ndarray, seed: int = 0
                ) -> tuple[Any, dict[str, Any], np.ndarray]:
    """3-fold grid search (seed 003 sec. 4.3) on centred y; returns the refitted best
    pipeline, its parameters and its cross-validated residuals."""
    est, grid = _estimator(kind)
    pipe = Pipeline([("scale", StandardScaler()), ("est", est)])
    folds = KFold(n_splits=3, shuffle=True, random_state=seed)
    search = GridSearchCV(pipe, {f"est__{k}": v for k, v in grid.items()}, cv=folds,
                          scoring="neg_mean_squared_error", n_jobs=1, error_score=np.nan)
    search.fit(X, y)
    best = search.best_estimator_
    cv_pred = cross_val_predict(clone(best), X, y, cv=folds)
    return best, {k.removeprefix("est__"): v for k, v in search.best_params_.items()}, y - cv_pred


class LearnerFit(FittedModel):
    """A fitted scikit-learn pipeline on log(time) with CV-residual intervals."""

    def __init__(self, name: str, kind: str, features: Callable[[Observations], np.ndarray],
                 feature_names: list[str], obs: Observations, level: float = 0.9,
                 extra: dict[str, Any] | None = None):
        self.name, self.kind, self.level = name, kind, level
        self._features, self.feature_names = features, feature_names
        X = features(obs)
        logt = np.log(obs.time_s)
        self.offset = float(logt.mean())
        self.model, best, resid = _fit_search(kind, X, logt - self.offset)
        self.resid_lo, self.resid_hi = np.quantile(resid, [(1 - level) / 2, (1 + level) / 2])
        self.params = {k: float(v) if isinstance(v, (int, float)) and v is not None else np.nan
                       for k, v in best.items()}
        self.hyper = best
        self.extra = extra or {}
        self.quality = fit_quality(obs.time_s, np.exp(self.model.predict(X) + self.offset))
        self.quality["cv_rmse_log"] = float(np.sqrt(np.mean(resid ** 2)))
        self.quality["cv_mape"] = fit_quality(obs.time_s,
                                              obs.time_s * np.exp(-resid))["mape"]

    def predict(self, query: Observations) -> Prediction:
        """exp(model + mean log time); rows whose features are missing give NaN."""
        X = self._features(query)
        ok = np.all(np.isfinite(X), axis=1)
        mu = np.full(len(query), np.nan)
        if ok.any():
            mu[ok] = self.model.predict(X[ok]) + self.offset
        return Prediction(np.exp(mu), np.exp(mu + self.resid_lo), np.exp(mu + self.resid_hi),
                          self.level)

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["params"] = {k: (v if isinstance(v, (int, float, str)) or v is None else str(v))
                       for k, v in self.hyper.items()}
        d["features"] = list(self.feature_names)
        d.update(self.extra)
        return d


# ----------------------------------------------------------------- (a) seed 003 sec. 4.3


def _config_columns(obs: Observations) -> list[str]:
    """Which of cores / freq_mhz vary (and are finite) in ``obs``."""
    cols = []
    if np.unique(obs.cores).size >= 2:
        cols.append("cores")
    if obs.has_freq():
        cols.append("freq_mhz")
    return cols


def _column_getter(cols: Sequence[str]) -> Callable[[Observations], np.ndarray]:
    def get(o: Observations) -> np.ndarray:
        out = []
        for c in cols:
            v = getattr(o, c)
            out.append(np.full(len(o), np.nan) if v is None else np.asarray(v, float))
        return np.column_stack(out)
    return get


class _ConfigLearner(Modeler):
    """Seed 003 learners over (cores, frequency) on log(time)."""
    kind = ""

    def __init__(self, level: float = 0.9):
        self.level = level

    def applicable(self, obs: Observations) -> str | None:
        use = _good_time(obs)
        if use.sum() < MIN_ROWS:
            return f"needs at least {MIN_ROWS} runs with a positive time, has {int(use.sum())}"
        if not _config_columns(obs.subset(use)):
            return "neither cores nor frequency varies"
        return None

    def fit(self, obs: Observations) -> FittedModel:
        reason = self.applicable(obs)
        if reason:
            raise NotEnoughData(f"{self.name}: {reason}")
        obs = obs.subset(_good_time(obs))
        cols = _config_columns(obs)
        return LearnerFit(self.name, self.kind, _column_getter(cols), cols, obs, self.level)


class KRRModeler(_ConfigLearner):
    """Kernel ridge regression, RBF kernel (seed 003 sec. 4.3)."""
    name, kind = "krr", "krr"


class SVRModeler(_ConfigLearner):
    """Support vector regression, RBF kernel (seed 003 sec. 4.3)."""
    name, kind = "svr", "svr"


class DecisionTreeModeler(_ConfigLearner):
    """Decision tree regression (seed 003 sec. 4.3)."""
    name, kind = "dtree", "dtree"


# ------------------------------------------------------------- (b) seed 004 SmartPred


def filter_features(features: dict[str, np.ndarray], time_s: np.ndarray, m: int
                    ) -> tuple[list[str], dict[str, Any]]:
    """Seed 004 sec. IV.B: drop features invalid (NaN) in any row, duplicates (identical
    values in every row; the first name in sorted order stays), zero variance; rank the rest
    by |Pearson r| with time, keep the top ``m``. Returns the kept names (best first) and a
    report of what was dropped and every r."""
    names = sorted(features)
    report: dict[str, Any] = {"invalid": [], "duplicate": {}, "constant": [], "r": {}}
    valid = []
    for k in names:
        v = np.asarray(features[k], float)
        if np.all(np.isfinite(v)):
            valid.append(k)
        else:
            report["invalid"].append(k)
    seen: dict[bytes, str] = {}
    distinct = []
    for k in valid:
        v = np.asarray(features[k], float)
        if np.ptp(v) == 0:
            report["constant"].append(k)
            continue
        key = v.tobytes()
        if key in seen:
            report["duplicate"][k] = seen[key]
            continue
        seen[key] = k
        distinct.append(k)
    t = np.asarray(time_s, float)
    for k in distinct:
        r = np.corrcoef(np.asarray(features[k], float), t)[0, 1] if np.ptp(t) > 0 else 0.0
        report["r"][k] = float(r) if np.isfinite(r) else 0.0
    ranked = sorted(distinct, key=lambda k: -abs(report["r"][k]))
    return ranked[:m], report


def _log_feature(v: np.ndarray) -> np.ndarray:
    # log1p: counters may be 0; negative values are not counts -> NaN (row unusable)
    v = np.asarray(v, float)
    with np.errstate(invalid="ignore"):
        return np.where(v >= 0, np.log1p(np.where(v >= 0, v, 0.0)), np.nan)


def _feature_getter(counters: Sequence[str], config: Sequence[str]
                    ) -> Callable[[Observations], np.ndarray]:
    """x = {log p, log f, log b_1, ..., log b_m} (seed 004 sec. IV.C)."""
    def get(o: Observations) -> np.ndarray:
        cols = [_column_getter([c])(o)[:, 0] for c in config]
        cols = [np.log(np.where(c > 0, c, np.nan)) for c in cols]
        for k in counters:
            v = o.counters.get(k)
            cols.append(np.full(len(o), np.nan) if v is None else _log_feature(v))
        return np.column_stack(cols)
    return get


class _FeatureLearner(Modeler):
    """Seed 004 runtime-feature learner: filtered counters + cores + frequency."""
    kind = ""
    use_counters = True

    def __init__(self, m: int = 6, level: float = 0.9):
        self.m, self.level = m, level   # m = 6 as in the seed's Table III

    def _config(self, obs: Observations) -> list[str]:
        cols = _config_columns(obs)
        if (obs.input_size is not None and np.all(np.isfinite(obs.input_size))
                and np.all(obs.input_size > 0) and np.unique(obs.input_size).size >= 2):
            cols.append("input_size")
        return cols

    def applicable(self, obs: Observations) -> str | None:
        use = _good_time(obs)
        if use.sum() < MIN_ROWS:
            return f"needs at least {MIN_ROWS} runs with a positive time, has {int(use.sum())}"
        sub = obs.subset(use)
        if self.use_counters:
            feats = runtime_counters(sub.counters)
            if not feats:
                return "no counters (runtime features) in the data"
            kept, _ = filter_features(feats, sub.time_s, self.m)
            if not kept:
                return "no counter is valid in every run and varies"
        elif not self._config(sub):
            return "no input parameter (cores, frequency, input size) varies"
        return None

    def fit(self, obs: Observations) -> FittedModel:
        reason = self.applicable(obs)
        if reason:
            raise NotEnoughData(f"{self.name}: {reason}")
        obs = obs.subset(_good_time(obs))
        config = self._config(obs)
        report: dict[str, Any] = {}
        counters: list[str] = []
        if self.use_counters:
            counters, report = filter_features(runtime_counters(obs.counters), obs.time_s,
                                               self.m)
        getter = _feature_getter(counters, config)
        names = [f"log({c})" for c in config] + [f"log1p({k})" for k in counters]
        return LearnerFit(self.name, self.kind, getter, names, obs, self.level,
                          extra={"filtering": report} if report else None)


class FeatureSVRModeler(_FeatureLearner):
    """SmartPred with RBF SVR."""
    name, kind = "feat_svr", "feat_svr"


class FeatureRFModeler(_FeatureLearner):
    """SmartPred with a random forest."""
    name, kind = "feat_rf", "feat_rf"


class FeatureRidgeModeler(_FeatureLearner):
    """SmartPred with ridge regression."""
    name, kind = "feat_ridge", "feat_ridge"


class InputParamModeler(_FeatureLearner):
    """Seed 004's baseline: the same learner over input parameters only (cores, frequency,
    input size), no runtime features."""
    use_counters = False

    def __init__(self, kind: str = "feat_svr", level: float = 0.9):
        super().__init__(m=0, level=level)
        self.kind = kind
        self.name = "input_" + kind.removeprefix("feat_")


FEATURE_LEARNERS = {"svr": FeatureSVRModeler, "rf": FeatureRFModeler, "ridge": FeatureRidgeModeler}


def compare_feature_sets(train: Observations, test: Observations, m: int = 6,
                         learners: Sequence[str] = ("svr", "rf", "ridge")) -> dict[str, Any]:
    """Seed 004 Table III on our data: MAPE and standard deviation of the absolute percentage
    errors on ``test`` for each learner with RUNTIME features (filtered counters + cores/freq)
    and with INPUT parameters only. Test rows keep their measured counters, as SmartPred's
    collector would provide them."""
    out: dict[str, Any] = {"RUNTIME": {}, "INPUT": {}, "features": {}, "skipped": {}}
    keep = _good_time(test)
    test = test.subset(keep)
    for name in learners:
        for label, modeler in (("RUNTIME", FEATURE_LEARNERS[name](m=m)),
                               ("INPUT", InputParamModeler("feat_" + name))):
            try:
                fitted = modeler.fit(train)
            except NotEnoughData as exc:
                out["skipped"][f"{label}/{name}"] = str(exc)
                continue
            pred = fitted.predict(test).value
            ape = 100 * np.abs(pred - test.time_s) / test.time_s
            out[label][name] = {"mape": float(np.nanmean(ape)), "std": float(np.nanstd(ape)),
                                "n": int(np.isfinite(ape).sum())}
            out["features"][label] = list(fitted.feature_names)
    return out
