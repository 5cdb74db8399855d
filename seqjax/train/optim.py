"""Optimizers and learning-rate schedules from ``config.optimizer``, built with optax.

``make_optimizer(config.optimizer, num_steps)`` returns ``(tx, schedule)``:

    tx = chain(clip_by_global_norm(grad_clip_norm)?,  <name>(schedule, ...))

**Optimizers** (``optimizer.name``; all optax, nothing hand-written):

- ``adamw``: Adam with decoupled weight decay (Loshchilov & Hutter 2019), ``optax.adamw``;
  the decay is multiplied by the learning rate, as in PyTorch and Flax's old ``optim.Adam``
  (which LRA used).
- ``adam``: ``optax.adam`` (Kingma & Ba 2015) without weight decay (Transformer-XL).
- ``adafactor``: ``optax.adafactor`` (Shazeer & Stern 2018; Reformer, Kitaev et al. 2020),
  the fields of ``optimizer.adafactor``; weight decay is added after the learning-rate
  scaling (not multiplied by it), as optax and T5 do.
- ``sgd``: ``optax.sgd`` with ``momentum`` (0 = none) and ``nesterov``; weight decay is
  added to the gradient (L2) before the momentum.
- ``lamb``: ``optax.lamb`` (You et al. 2020), layer-wise trust ratio.

**Schedules** (``optimizer.schedule``; ``step`` = updates already applied, optax's count):

- ``warmup_cosine``: linear 0 -> ``learning_rate`` over ``warmup_steps``, then cosine to
  ``learning_rate * min_lr_ratio`` at ``train.num_steps`` (Loshchilov & Hutter 2017).
- ``warmup_linear``: the same warm-up, then linear to ``learning_rate * min_lr_ratio``.
- ``constant``: the same warm-up (none if ``warmup_steps`` = 0), then ``learning_rate``.
- ``rsqrt``: LRA's ``constant * linear_warmup * rsqrt_decay`` (Tay et al. 2020, reference
  ``train_utils.create_learning_rate_scheduler``):
  ``learning_rate * min(1, step / warmup) / sqrt(max(step, warmup))``; ``learning_rate`` is
  LRA's ``constant`` (0.05 with warm-up 1,000 peaks at 0.05 / sqrt(1000) = 1.58e-3).
- ``inverse_sqrt``: Vaswani et al. 2017, §5.3,
  ``lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``, written with its peak
  ``learning_rate = (d_model * warmup)^-0.5`` as
  ``learning_rate * min(sqrt(warmup / step), step / warmup)``.

**Weight decay mask** (``optimizer.weight_decay_mask``), chosen by parameter path:

- ``matrices``: weight matrices and embeddings; never biases (``bias``, ``*_bias`` such as
  Transformer-XL's ``r_w_bias``/``r_r_bias`` u and v, Dai et al. 2019 §3.3), LayerNorm
  ``scale``, or the classifier's ``cls`` vector (nor any other parameter of fewer than 2 dims);
- ``all``: every parameter (LRA: Flax's ``optim.Adam`` had no mask);
- ``none``: no parameter (then ``weight_decay`` must be 0).

**Frozen parameters** (``optimizer.freeze``): a list of parameter-path prefixes such as
``("encoder",)`` or ``("teacher", "encoder/block_0")`` (paths are the parameters' dict keys
joined by ``/``; a prefix matches a path equal to it or starting with it and ``/``). Their
updates are zero and they keep no optimizer state: ``optax.multi_transform`` sends them to
``optax.set_to_zero`` and everything else to the optimizer above (its clipping, decay and
moments see only the trained parameters). Feature-based transfer (Devlin et al. 2019 §5.3:
a frozen pre-trained BERT under a new head) and distillation's teacher use it. A prefix that
matches no parameter is an error (a typo would silently train everything).
"""

from __future__ import annotations

import logging
import math

import jax
import jax.numpy as jnp
import optax
from flax.core import meta

from seqjax.train import defaults

NAMES = ("adamw", "adam", "adafactor", "sgd", "lamb")
SCHEDULES = ("warmup_cosine", "warmup_linear", "constant", "rsqrt", "inverse_sqrt")
DECAY_MASKS = ("matrices", "all", "none")
# Last path entries of parameters that "matrices" never decays (besides anything < 2-D).
NO_DECAY_NAMES = ("bias", "scale", "cls")


def _get(opt, field: str):
    """``opt.<field>``, or the default for configs written before the field existed."""
    value = opt.get(field) if hasattr(opt, "get") else getattr(opt, field, None)
    return getattr(defaults.optimizer(), field) if value is None else value


def _adafactor_field(opt, field: str):
    block = opt.get("adafactor") if hasattr(opt, "get") else None
    value = block.get(field) if block is not None else None
    return defaults.optimizer().adafactor[field] if value is None else value


# ---------------------------------------------------------------------------- schedules


def rsqrt_schedule(learning_rate: float, warmup_steps: int):
    """LRA's ``constant * linear_warmup * rsqrt_decay`` (Tay et al. 2020):
    ``learning_rate * min(1, step / warmup) / sqrt(max(step, warmup))``."""
    w = float(warmup_steps)

    def schedule(step):
        s = jnp.asarray(step, jnp.float32)
        return learning_rate * jnp.minimum(1.0, s / w) / jnp.sqrt(jnp.maximum(s, w))

    return schedule


def inverse_sqrt_schedule(learning_rate: float, warmup_steps: int):
    """Vaswani et al. 2017, §5.3, with its peak ``learning_rate`` (reached at ``warmup``):
    ``learning_rate * min(sqrt(warmup / step), step / warmup)``; equal to
    ``d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)`` when
    ``learning_rate = (d_model * warmup)^-0.5``."""
    w = float(warmup_steps)

    def schedule(step):
        s = jnp.asarray(step, jnp.float32)
        return learning_rate * jnp.minimum(jnp.sqrt(w / jnp.maximum(s, 1.0)), s / w)

    return schedule


def make_schedule(opt, num_steps: int):
    """The learning-rate schedule ``step -> rate`` named by ``opt.schedule``."""
    name = _get(opt, "schedule")
    lr = float(_get(opt, "learning_rate"))
    warmup = int(_get(opt, "warmup_steps"))
    end = lr * float(_get(opt, "min_lr_ratio"))
    if name == "warmup_cosine":
        return optax.warmup_cosine_decay_schedule(
            init_value=0.0,
            peak_value=lr,
            warmup_steps=warmup,
            decay_steps=max(num_steps, warmup + 1),
            end_value=end,
        )
    if name == "warmup_linear":
        return optax.join_schedules(
            [
                optax.linear_schedule(0.0, lr, warmup),
                optax.linear_schedule(lr, end, max(num_steps - warmup, 1)),
            ],
            [warmup],
        )
    if name == "constant":
        if warmup == 0:
            return optax.constant_schedule(lr)
        return optax.warmup_constant_schedule(0.0, lr, warmup)
    if name == "rsqrt":
        return rsqrt_schedule(lr, warmup)
    if name == "inverse_sqrt":
        return inverse_sqrt_schedule(lr, warmup)
    raise ValueError(f"config.optimizer.schedule={name!r} is invalid; valid: {SCHEDULES}")


# ---------------------------------------------------------------------------- decay mask


def _leaf_name(path) -> str:
    """The parameter's own name: the last dict key of its path (boxed leaves end in
    ``.value``, which is skipped)."""
    for entry in reversed(path):
        if isinstance(entry, jax.tree_util.DictKey):
            return str(entry.key)
    return ""


def is_decayed_matrix(path, leaf) -> bool:
    """Whether mask "matrices" decays the parameter at ``path``."""
    name = _leaf_name(path)
    if name in NO_DECAY_NAMES or name.endswith("_bias"):
        return False
    return jnp.ndim(leaf) >= 2


def decay_mask(kind: str):
    """The ``mask`` argument for optax: a function ``params -> bool pytree``, or None
    (every parameter) for "all"."""
    if kind == "all":
        return None
    if kind == "matrices":
        return lambda params: jax.tree_util.tree_map_with_path(is_decayed_matrix, params)
    if kind == "none":
        return lambda params: jax.tree.map(lambda _: False, params)
    raise ValueError(
        f"config.optimizer.weight_decay_mask={kind!r} is invalid; valid: {DECAY_MASKS}"
    )


# ---------------------------------------------------------------------------- optimizer


def _base(opt, schedule):
    name = _get(opt, "name")
    wd = float(_get(opt, "weight_decay"))
    mask_kind = _get(opt, "weight_decay_mask")
    mask = decay_mask(mask_kind)
    if mask_kind == "none":
        wd = 0.0
    b1, b2, eps = float(_get(opt, "b1")), float(_get(opt, "b2")), float(_get(opt, "eps"))
    if name == "adamw":
        return optax.adamw(schedule, b1=b1, b2=b2, eps=eps, weight_decay=wd, mask=mask)
    if name == "adam":
        return optax.adam(schedule, b1=b1, b2=b2, eps=eps)
    if name == "lamb":
        return optax.lamb(schedule, b1=b1, b2=b2, eps=eps, weight_decay=wd, mask=mask)
    if name == "sgd":
        momentum = float(_get(opt, "momentum"))
        sgd = optax.sgd(schedule, momentum=momentum or None, nesterov=bool(_get(opt, "nesterov")))
        return optax.chain(optax.add_decayed_weights(wd, mask), sgd) if wd else sgd
    if name == "adafactor":
        momentum = float(_adafactor_field(opt, "momentum"))
        clip = float(_adafactor_field(opt, "clipping_threshold"))
        return optax.adafactor(
            schedule,
            min_dim_size_to_factor=int(_adafactor_field(opt, "min_dim_size_to_factor")),
            decay_rate=float(_adafactor_field(opt, "decay_rate")),
            multiply_by_parameter_scale=bool(_adafactor_field(opt, "multiply_by_parameter_scale")),
            clipping_threshold=clip or None,
            momentum=momentum or None,
            weight_decay_rate=wd or None,
            eps=float(_adafactor_field(opt, "eps")),
            weight_decay_mask=mask,
        )
    raise ValueError(f"config.optimizer.name={name!r} is invalid; valid: {NAMES}")


def _path_text(path) -> str:
    """``encoder/block_0/attn/kernel`` of a parameter path (a boxed leaf's ``.value`` and any
    other non-dict entry skipped)."""
    return "/".join(str(e.key) for e in path if isinstance(e, jax.tree_util.DictKey))


def _under(text: str, prefix: str) -> bool:
    prefix = prefix.strip("/")
    return text == prefix or text.startswith(prefix + "/")


def freeze_labels(prefixes):
    """``params -> {"frozen", "train"} pytree`` for ``optax.multi_transform``: "frozen" where
    the parameter path is under one of ``prefixes`` (``optimizer.freeze``).

    Raises:
      ValueError: a prefix matches no parameter (raised when the optimizer state is first
        built from the parameters' shapes, before anything compiles).
    """
    prefixes = tuple(str(p) for p in prefixes)

    def labels(params):
        # A logically boxed parameter is one label (optax then masks the whole box).
        leaves = jax.tree_util.tree_flatten_with_path(params, is_leaf=_is_box)[0]
        texts = [_path_text(path) for path, _ in leaves]
        for prefix in prefixes:
            if not any(_under(t, prefix) for t in texts):
                tops = sorted({t.split("/")[0] for t in texts})
                raise ValueError(
                    f"config.optimizer.freeze entry {prefix!r} matches no parameter; valid: "
                    f"path prefixes such as {', '.join(repr(t) for t in tops)}"
                )
        return jax.tree_util.tree_map_with_path(
            lambda path, _: (
                "frozen" if any(_under(_path_text(path), p) for p in prefixes) else "train"
            ),
            params,
            is_leaf=_is_box,
        )

    return labels


def _is_box(x) -> bool:
    return isinstance(x, meta.AxisMetadata)


def make_optimizer(opt, num_steps: int, also_freeze=()):
    """Optional global-norm clipping, then the optimizer ``opt.name`` on its schedule.

    Args:
      opt: ``config.optimizer``.
      num_steps: ``config.train.num_steps`` (where the decaying schedules end).
      also_freeze: prefixes frozen besides ``opt.freeze`` (a model family's own
        ``Family.frozen`` subtrees: feature-based transfer).

    Returns:
      ``(optax.GradientTransformation, schedule)``.
    """
    problems = optimizer_problems(opt)
    if problems:
        raise ValueError("invalid optimizer config:\n  - " + "\n  - ".join(problems))
    schedule = make_schedule(opt, num_steps)
    tx = _base(opt, schedule)
    clip_norm = float(_get(opt, "grad_clip_norm"))
    if clip_norm > 0:
        tx = optax.chain(optax.clip_by_global_norm(clip_norm), tx)
    frozen = tuple(dict.fromkeys((*(_get(opt, "freeze") or ()), *also_freeze)))
    if frozen:
        tx = optax.multi_transform(
            {"train": tx, "frozen": optax.set_to_zero()}, freeze_labels(frozen)
        )
    logging.info("optimizer: %s", describe(opt, num_steps))
    return tx, schedule


def describe(opt, num_steps: int) -> str:
    """One line for the run header, e.g. ``adamw(b1=0.9, b2=0.99, eps=1e-08, weight_decay=0.01
    on matrices) on warmup_cosine(peak 0.001, warmup 100, end 0.0001 at 1000), clip 1.0``."""
    name, sched = _get(opt, "name"), _get(opt, "schedule")
    wd, mask = float(_get(opt, "weight_decay")), _get(opt, "weight_decay_mask")
    decay = f"weight_decay={wd:g} on {mask}" if wd and mask != "none" else "no weight decay"
    if name in ("adamw", "adam", "lamb"):
        args = f"b1={_get(opt, 'b1')}, b2={_get(opt, 'b2')}, eps={_get(opt, 'eps'):g}"
    elif name == "sgd":
        args = f"momentum={_get(opt, 'momentum')}, nesterov={_get(opt, 'nesterov')}"
    else:
        fields = ("decay_rate", "clipping_threshold", "multiply_by_parameter_scale", "momentum")
        args = ", ".join(f"{f}={_adafactor_field(opt, f)}" for f in fields)
    lr, warmup = float(_get(opt, "learning_rate")), int(_get(opt, "warmup_steps"))
    end = lr * float(_get(opt, "min_lr_ratio"))
    if sched in ("warmup_cosine", "warmup_linear"):
        shape = f"peak {lr:g}, warmup {warmup}, end {end:g} at step {num_steps}"
    elif sched == "rsqrt":
        shape = f"constant {lr:g}, warmup {warmup}, peak {lr / math.sqrt(max(warmup, 1)):.3g}"
    else:
        shape = f"peak {lr:g}, warmup {warmup}"
    clip = float(_get(opt, "grad_clip_norm"))
    clip_text = f", clip global norm {clip:g}" if clip > 0 else ", no clipping"
    frozen = tuple(_get(opt, "freeze") or ())
    frozen_text = f", frozen: {', '.join(frozen)}" if frozen else ""
    return f"{name}({args}, {decay}) on {sched}({shape}){clip_text}{frozen_text}"


# ---------------------------------------------------------------------------- recipes


def set_lra_recipe(o, warmup_steps: int) -> None:
    """Sets ``o`` (``config.optimizer``) to Long Range Arena's optimizer and schedule (Tay et
    al. 2020; reference ``train.py``: Flax ``optim.Adam(b1=0.9, b2=0.98, eps=1e-9,
    weight_decay=0.1)`` on every parameter, learning rate ``constant * linear_warmup *
    rsqrt_decay`` with constant 0.05, no gradient clipping). Flax's decay is decoupled and
    multiplied by the rate, i.e. optax's ``adamw`` with mask "all"."""
    o.name = "adamw"
    o.b1, o.b2, o.eps = 0.9, 0.98, 1e-9
    o.weight_decay = 0.1
    o.weight_decay_mask = "all"
    o.schedule = "rsqrt"
    o.learning_rate = 0.05  # the constant: peak 0.05 / sqrt(warmup_steps)
    o.warmup_steps = int(warmup_steps)
    o.grad_clip_norm = 0.0


# ---------------------------------------------------------------------------- validation


def validate_optimizer(config) -> list[str]:
    """Problems of ``config.optimizer``'s fields added with this module (name, schedule,
    mask and their parameters), one line each naming the field and the valid values; the
    common fields (learning_rate, warmup_steps, b1, b2, eps, ...) are checked in
    ``seqjax.train.config_validation``."""
    return optimizer_problems(config.optimizer)


def optimizer_problems(o) -> list[str]:
    """``validate_optimizer`` of the block ``o`` (``config.optimizer``)."""
    errors: list[str] = []

    def bad(field: str, value, valid: str) -> None:
        errors.append(f"config.optimizer.{field}={value!r} is invalid; valid: {valid}")

    name, sched, mask = _get(o, "name"), _get(o, "schedule"), _get(o, "weight_decay_mask")
    if name not in NAMES:
        bad("name", name, ", ".join(NAMES))
    if sched not in SCHEDULES:
        bad("schedule", sched, ", ".join(SCHEDULES))
    if mask not in DECAY_MASKS:
        bad("weight_decay_mask", mask, ", ".join(DECAY_MASKS))
    wd = _get(o, "weight_decay")
    if name == "adam" and wd:
        bad("weight_decay", wd, '0 for optimizer.name="adam" (use "adamw" for weight decay)')
    elif mask == "none" and wd:
        bad("weight_decay", wd, '0 when optimizer.weight_decay_mask="none"')
    if sched in ("rsqrt", "inverse_sqrt") and _get(o, "warmup_steps") < 1:
        bad("warmup_steps", _get(o, "warmup_steps"), f'>= 1 for optimizer.schedule="{sched}"')
    momentum = _get(o, "momentum")
    if not 0.0 <= momentum < 1.0:
        bad("momentum", momentum, "0 <= momentum < 1 (0 = plain SGD)")
    if name == "sgd" and _get(o, "nesterov") and not momentum:
        bad("nesterov", True, "False when optimizer.momentum=0 (Nesterov needs momentum)")
    freeze = _get(o, "freeze")
    if isinstance(freeze, str) or not all(isinstance(p, str) and p.strip("/") for p in freeze):
        bad("freeze", freeze, "a list of parameter-path prefixes such as ('encoder',)")
    if name == "adafactor":
        for field, ok, valid in (
            ("decay_rate", lambda v: 0.0 < v <= 1.0, "0 < rate <= 1"),
            ("clipping_threshold", lambda v: v >= 0, ">= 0 (0 = no update clipping)"),
            ("momentum", lambda v: 0.0 <= v < 1.0, "0 <= momentum < 1 (0 = none)"),
            ("eps", lambda v: v > 0, "> 0"),
            ("min_dim_size_to_factor", lambda v: isinstance(v, int) and v >= 1, ">= 1"),
        ):
            value = _adafactor_field(o, field)
            if not ok(value):
                bad(f"adafactor.{field}", value, valid)
    return errors
