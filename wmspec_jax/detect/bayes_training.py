"""Training the Bayesian SynthID detectors (:mod:`.bayes`).

Training (:func:`train_bayes`): Optax Adam on the mean binary cross-entropy
of the log-odds plus l2 · Σ δ², one ``jax.jit``-compiled epoch
(``lax.scan`` over shuffled minibatches) with the whole L2 grid trained
side by side under ``vmap``; after every epoch each grid member is scored
on the validation split (TPR at the target FPR, threshold from the
validation negatives), the best epoch's parameters are kept (ties: lower
validation loss) and a member stops after ``patience`` epochs without
improvement. The best member wins. Variable lengths are handled by the
scored-position masks throughout.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from wmspec_jax.detect.bayes import BayesConfig, _log_odds, bayes_detector, init_params
from wmspec_jax.detect.common import check_unit, fitted_provenance
from wmspec_jax.detect.metrics import _tpr_at_fpr
from wmspec_jax.detect.provenance import Provenance, merge
from wmspec_jax.detect.streams_batches import concat, concat_source
from wmspec_jax.detect.streams_types import SynthIDStats, check_source
from wmspec_jax.detect.synthid import _check_stats
from wmspec_jax.sources import SOURCE_DRAFT

# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------


class Dataset(NamedTuple):
    """Labelled texts for training/validating a Bayesian detector.

    Attributes:
      g_draft, g_target: uint8[N, L, m].
      u: float32[N, L].
      mask: bool[N, L].
      choose_draft: bool[N, L] true source is the draft (Oracle only; False
        where unknown).
      labels: float32[N] 1 = watermarked, 0 = not.
      provenance: merged provenance of the statistics (static; None if unknown).
    """

    g_draft: jax.Array
    g_target: jax.Array
    u: jax.Array
    mask: jax.Array
    choose_draft: jax.Array
    labels: jax.Array
    provenance: Optional[Provenance] = None


def make_dataset(positives: SynthIDStats, negatives: SynthIDStats, *, positives_source=None,
                 negatives_source=None) -> Dataset:
    """Stacks watermarked (label 1) and unwatermarked (label 0) texts.

    Negatives should be real text — unwatermarked generations of the same
    models, human text — scored with the same key. Sources are needed for
    the Oracle mode only; give negatives without records a
    :func:`.streams.pseudo_source`.
    """
    positives, negatives = _check_stats(positives), _check_stats(negatives)
    if positives.g_target.shape[-1] != negatives.g_target.shape[-1]:
        raise ValueError("positives and negatives have different numbers of layers m")
    stats = concat([positives, negatives])
    length = stats.mask.shape[1]
    if (positives_source is None) != (negatives_source is None):
        raise ValueError("give token sources for both positives and negatives, or for neither")
    if positives_source is None:
        choose = jnp.zeros(stats.mask.shape, bool)
    else:
        src = concat_source([check_source(positives_source, positives.mask.shape),
                             check_source(negatives_source, negatives.mask.shape)], length)
        choose = jnp.asarray(src == SOURCE_DRAFT)
    labels = jnp.concatenate([jnp.ones(positives.mask.shape[0]), jnp.zeros(negatives.mask.shape[0])])
    return Dataset(stats.g_draft, stats.g_target, stats.u, stats.mask, choose, labels.astype(jnp.float32),
                   stats.provenance)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings of :func:`train_bayes`.

    Attributes:
      learning_rate: Adam step size.
      epochs: maximum number of epochs.
      batch_size: minibatch size (the last partial batch of a shuffle is
        dropped so shapes stay static).
      patience: epochs without validation improvement before a grid
        member stops.
      l2_grid: L2 weights on δ trained side by side (vmap).
      target_fpr: FPR of the validation criterion "TPR at FPR".
      seed: seeds initialisation and shuffling (training is deterministic
        given it).
    """

    learning_rate: float = 1e-2
    epochs: int = 100
    batch_size: int = 64
    patience: int = 10
    l2_grid: tuple = (0.0, 1e-3, 1e-2, 1e-1)
    target_fpr: float = 0.01
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "l2_grid", tuple(float(x) for x in self.l2_grid))
        if not self.l2_grid or min(self.l2_grid) < 0:
            raise ValueError("l2_grid must be a non-empty tuple of weights >= 0")
        for name in ("epochs", "batch_size", "patience"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1")
        check_unit(self.target_fpr, "target_fpr", open_interval=True)
        if not self.learning_rate > 0:
            raise ValueError("learning_rate must be > 0")


class TrainHistory(NamedTuple):
    """Per-epoch curves of every L2 grid member (host arrays).

    Attributes:
      train_loss, val_tpr, val_loss: float[E, G] (E = epochs run).
      best_epoch: int[G] epoch (0-based) whose parameters each member kept.
      best_val_tpr: float[G].
      selected: index of the chosen grid member.
    """

    train_loss: np.ndarray
    val_tpr: np.ndarray
    val_loss: np.ndarray
    best_epoch: np.ndarray
    best_val_tpr: np.ndarray
    selected: int


def _loss(params, config, batch: Dataset, l2):
    lo = _log_odds(params, config, batch.g_draft, batch.g_target, batch.u, batch.mask, batch.choose_draft,
                   training=True)
    bce = jnp.mean(optax.sigmoid_binary_cross_entropy(lo, batch.labels))
    reg = sum(jnp.sum(jnp.tril(params[s]["delta"], -1) ** 2) for s in config.streams)
    return bce + l2 * reg


@functools.lru_cache(maxsize=None)
def _trainer(config: BayesConfig, learning_rate: float, target_fpr: float):
    """Jitted epoch and validation functions for one static configuration."""
    opt = optax.adam(learning_rate)

    @jax.jit
    def epoch(params_g, opt_g, data: Dataset, batches, l2_g):
        def step(carry, idx):
            params_g, opt_g = carry
            batch = jax.tree_util.tree_map(lambda x: x[idx], data)

            def one(params, opt_state, l2):
                loss, grads = jax.value_and_grad(_loss)(params, config, batch, l2)
                updates, opt_state = opt.update(grads, opt_state, params)
                return optax.apply_updates(params, updates), opt_state, loss

            params_g, opt_g, loss_g = jax.vmap(one)(params_g, opt_g, l2_g)
            return (params_g, opt_g), loss_g

        (params_g, opt_g), losses = jax.lax.scan(step, (params_g, opt_g), batches)
        return params_g, opt_g, jnp.mean(losses, axis=0)

    @jax.jit
    def validate(params_g, data: Dataset, pos_idx, neg_idx):
        def one(params):
            lo = _log_odds(params, config, data.g_draft, data.g_target, data.u, data.mask, data.choose_draft,
                           training=False)
            loss = jnp.mean(optax.sigmoid_binary_cross_entropy(lo, data.labels))
            tpr, _ = _tpr_at_fpr(lo[pos_idx], lo[neg_idx], target_fpr)
            return tpr, loss

        return jax.vmap(one)(params_g)

    return opt, epoch, validate


def _check_splits(config: BayesConfig, train: Dataset, val: Dataset) -> None:
    """Both splits are :class:`Dataset` s of ``config``'s m with both labels (and sources for the Oracle)."""
    for name, data in (("train", train), ("val", val)):
        if not isinstance(data, Dataset):
            raise TypeError(f"{name} must be a detect.bayes_training.Dataset (make_dataset)")
        if data.g_target.shape[-1] != config.num_layers:
            raise ValueError(f"{name} data has m={data.g_target.shape[-1]} layers, config m={config.num_layers}")
        labels = np.asarray(data.labels)
        if labels.min() == labels.max():
            raise ValueError(f"{name} split needs both watermarked and unwatermarked texts")
    if config.mode == "oracle" and not (np.asarray(train.choose_draft).any() and np.asarray(val.choose_draft).any()):
        raise ValueError("Oracle training needs token sources (make_dataset(..., positives_source=...))")


def train_bayes(config: BayesConfig, train: Dataset, val: Dataset,
                train_config: TrainConfig = TrainConfig()) -> tuple:
    """Trains a Bayesian SynthID detector (see module doc for the procedure).

    Args:
      config: the detector (mode ``single``/``prior``/``mlp``/``oracle``).
      train, val: labelled :class:`Dataset` splits; each needs positives and
        negatives (validation TPR at FPR thresholds on its negatives).
      train_config: optimisation settings.

    Returns:
      (:class:`Bayes` with the selected member's best-epoch parameters,
      :class:`TrainHistory`). Its config records the chosen ``l2`` and
      ``best_epoch``.
    """
    _check_splits(config, train, val)
    provenance = fitted_provenance(merge([train.provenance, val.provenance]) if train.provenance and val.provenance
                                   else None, "synthid", config.context_width, config.num_layers)
    train, val = train._replace(provenance=None), val._replace(provenance=None)  # jitted code: arrays only
    tc = train_config
    opt, epoch_fn, validate_fn = _trainer(config, float(tc.learning_rate), float(tc.target_fpr))
    n_train = train.labels.shape[0]
    bs = min(int(tc.batch_size), n_train)
    num_batches = n_train // bs
    grid = jnp.asarray(tc.l2_grid, jnp.float32)
    num_grid = grid.shape[0]
    k_init, k_shuffle = jax.random.split(jax.random.key(tc.seed))
    params = init_params(config, k_init)
    # every grid member starts from the same point: only the L2 weight differs
    params_g = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (num_grid,) + x.shape), params)
    opt_g = jax.vmap(opt.init)(params_g)
    val_labels = np.asarray(val.labels)
    pos_idx = jnp.asarray(np.flatnonzero(val_labels == 1))
    neg_idx = jnp.asarray(np.flatnonzero(val_labels == 0))

    best_params = params_g
    best_tpr = np.full(num_grid, -1.0)
    best_loss = np.full(num_grid, np.inf)
    best_epoch = np.zeros(num_grid, np.int64)
    since_best = np.zeros(num_grid, np.int64)
    active = np.ones(num_grid, bool)
    history = {"train_loss": [], "val_tpr": [], "val_loss": []}
    for ep in range(int(tc.epochs)):
        perm = jax.random.permutation(jax.random.fold_in(k_shuffle, ep), n_train)
        batches = perm[: num_batches * bs].reshape(num_batches, bs)
        params_g, opt_g, train_loss = epoch_fn(params_g, opt_g, train, batches, grid)
        tpr, loss = (np.asarray(x, np.float64) for x in validate_fn(params_g, val, pos_idx, neg_idx))
        history["train_loss"].append(np.asarray(train_loss))
        history["val_tpr"].append(tpr)
        history["val_loss"].append(loss)
        improved = active & ((tpr > best_tpr) | ((tpr == best_tpr) & (loss < best_loss)))
        imp = jnp.asarray(improved)
        best_params = jax.tree_util.tree_map(
            lambda new, old: jnp.where(imp.reshape((-1,) + (1,) * (new.ndim - 1)), new, old), params_g, best_params)
        best_tpr = np.where(improved, tpr, best_tpr)
        best_loss = np.where(improved, loss, best_loss)
        best_epoch = np.where(improved, ep, best_epoch)
        since_best = np.where(improved, 0, since_best + 1)
        active &= since_best < tc.patience
        if not active.any():
            break
    # best TPR, then lower validation loss, then the smaller L2 weight
    selected = int(np.lexsort((np.asarray(tc.l2_grid), best_loss, -best_tpr))[0])
    chosen = jax.tree_util.tree_map(lambda x: np.asarray(x[selected]), best_params)
    det = dataclasses.replace(bayes_detector(config, chosen, provenance), info={
        "l2": float(tc.l2_grid[selected]), "best_epoch": int(best_epoch[selected]),
        "val_tpr": float(best_tpr[selected]), "target_fpr": float(tc.target_fpr)})
    hist = TrainHistory(
        train_loss=np.stack(history["train_loss"]),
        val_tpr=np.stack(history["val_tpr"]),
        val_loss=np.stack(history["val_loss"]),
        best_epoch=best_epoch,
        best_val_tpr=best_tpr,
        selected=selected,
    )
    return det, hist


__all__ = ["Dataset", "TrainConfig", "TrainHistory", "make_dataset", "train_bayes"]
