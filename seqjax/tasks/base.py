"""``Task``: what one kind of data asks of the training system (the base every task file
subclasses; ``seqjax.tasks.registry`` picks one by ``DataInfo.task``).

The training system calls a task in this order:

* before the data are prepared (``seqjax.train.config_validation``): ``input_length``,
  ``length_field``, ``causal`` and ``validate`` (a task is found from ``config.data.name``
  through ``datasets``);
* building the job (``seqjax.train.setup``): ``configure`` (config-dependent options such
  as a label-smoothing epsilon), ``model_config``, ``build_model`` and ``init_shapes`` (the
  dummy inputs that initialise the parameters);
* every train and eval step (``seqjax.train.step``): ``check_batch`` (at trace time: before
  anything compiles), ``batch_sums`` = ``apply`` then ``sums``; the train loss is
  ``loss_sum / sum(weights)`` over the global batch and ``train_metrics`` turns the sums
  into the logged metrics; ``zero_sums``/``sum_keys`` for accumulation;
* evaluation (``seqjax.train.evaluator``): ``eval_summary`` of the summed split, then the
  optional ``decode_metrics`` hook (metrics that need decoding a whole split, e.g. BLEU);
  after each evaluation the loop asks ``eval_pictures`` (``config.eval.pictures``) and
  writes every picture as ``<workdir>/<name>/step_XXXXXX.png`` and a TensorBoard image;
* the loop's throughput and MFU: ``unit``, ``tokens_per_step``, ``flops_per_step``;
* generation, where ``generates`` is True: ``sample`` (the loop's end-of-run sample and
  ``python -m seqjax.sample``) after ``check_sample_inputs``.

Every batch carries a ``'weights'`` field (float32, 0 on padding and on positions that do
not count): the losses are weighted sums, so gradient accumulation and any sharding give
the mean of one big batch.

Legend: B batch, T input length, V vocabulary / classes.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from seqjax.tasks import losses

SUM_KEYS = ("loss_sum", "correct_sum", "weight_sum")
CHARS = "token_chars"  # seqjax.data.token_chars.FIELD: each input token's characters


class Task:
    """One task. Subclass it, set ``name`` (and what differs below), and ``register`` an
    instance (``seqjax.tasks.register``). Defaults are the "one token sequence in, logits
    out" form of the LM and the classifier.

    Attributes:
      name: the registry name, equal to the ``DataInfo.task`` the data produce.
      datasets: ``config.data.name`` values whose data are this task when their data set
        does not say (``seqjax.data.registry.DataSet.task`` names the task of every
        registered data set; config validation finds the task before the data are prepared).
      batch_fields: ``{field: (dtype, rank)}`` of every batch (``check_batch``).
      sum_keys: the float32 scalar sums ``sums`` returns (``weight_sum`` among them).
      unit: what ``tokens_per_step`` counts, shown in the progress line ('tok', 'ex').
      causal: whether the model's attention is causal (config validation probes the
        attention options with it).
      length_field: the config field that sets ``input_length`` (named in errors).
      generates: whether ``sample`` is implemented (``python -m seqjax.sample`` and the
        loop's end-of-run sample ask this, never the name).
      sample_to_file: ``sample`` writes a file named by its prompt (image grids), so
        ``python -m seqjax.sample --out FILE`` passes FILE as the prompt.
      family: the model family (``seqjax.models.registry``) trained when
        ``config.model.family`` is "auto".
    """

    name: str = ""
    datasets: tuple[str, ...] = ()
    batch_fields: dict[str, tuple[str, int]] = {
        "inputs": ("int32", 2),
        "targets": ("int32", 2),
        "weights": ("float32", 2),
    }
    sum_keys: tuple[str, ...] = SUM_KEYS
    unit: str = "tok"
    causal: bool = True
    length_field: str = "data.seq_len"
    generates: bool = False
    sample_to_file: bool = False
    family: str = "transformer"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<task {self.name!r}>"

    def handles(self, data_config) -> bool:
        """Whether ``config.data`` (whose name is in ``datasets``) is this task's; one data
        set read by two tasks (images: ``data.image_task``) answers here (default True)."""
        del data_config
        return True

    def configure(self, config) -> Task:
        """This task with options read from ``config`` (default: itself, no options)."""
        del config
        return self

    # ---- config, before the data are prepared --------------------------------------------

    def input_length(self, config) -> int:
        """Tokens per example the model sees (checked against ``model.max_len``)."""
        return int(config.data.seq_len)

    def validate(self, config, bad) -> None:
        """Calls ``bad(field, value, valid)`` for each config field wrong for this task."""
        del config, bad

    # ---- the model -----------------------------------------------------------------------

    def needs(self, config, info):
        """What this task asks of its model (``seqjax.models.registry.Needs``): causal
        attention per ``causal``, no classes."""
        del config, info
        from seqjax.models.registry import Needs

        return Needs(self.name, causal=self.causal)

    def model_config(self, config, info):
        """The config dataclass of the job's model family (``config.model.family``; "auto":
        this task's ``family``) for this task's data (``info``)."""
        from seqjax.models import registry

        family = registry.for_config(config, self.family)
        return family.build_config(config, info, self.needs(config, info))

    def make_model(self, model_cfg, *, decode: bool = False):
        """The Flax module of ``model_cfg`` for this task (``decode``: with a KV cache, for
        generation): its family's module for this task's name."""
        from seqjax.models import registry

        return registry.for_model_config(model_cfg).module(model_cfg, task=self, decode=decode)

    def build_model(self, config, model_cfg):
        """The module that trains: the family's ``train_module`` where it has one (a
        recurrent model), else ``make_model``."""
        from seqjax.models import registry

        family = registry.for_model_config(model_cfg)
        if family.train_module is not None:
            return family.train_module(config, model_cfg, task=self)
        return self.make_model(model_cfg)

    def init_shapes(self, config, info) -> tuple:
        """Shapes of the int32 dummy inputs passed to ``model.init`` (one per positional
        input of the model's ``__call__``)."""
        del info
        return ((1, self.input_length(config)),)

    # ---- batches, loss and metrics -------------------------------------------------------

    def check_batch(self, batch) -> None:
        """Raises ``ValueError`` naming the field when ``batch`` (numpy or traced arrays)
        lacks a field of ``batch_fields``, has another, or one of the wrong dtype or rank."""
        want = dict(self.batch_fields)
        if CHARS in batch:  # config.data.token_chars: any task's batches may carry them
            want.setdefault(CHARS, ("int32", 3))
        if set(batch) != set(want):
            raise ValueError(
                f"task {self.name!r} batches have the fields {sorted(want)}; got {sorted(batch)}"
            )
        for field, (dtype, rank) in want.items():
            x = batch[field]
            if jnp.dtype(x.dtype) != jnp.dtype(dtype) or len(x.shape) != rank:
                raise ValueError(
                    f"task {self.name!r}: batch[{field!r}] must be {dtype} of rank {rank}; "
                    f"got {jnp.dtype(x.dtype).name} of shape {tuple(x.shape)}"
                )

    def apply(self, model, params, batch, *, rng, train: bool, memory=None):
        """``(outputs, new_memory)`` of ``model`` on ``batch``: ``model.apply`` on
        ``batch['inputs']`` (and the memory of a recurrent model, ``seqjax.models.memory``;
        None otherwise; ``token_chars_BTL=batch['token_chars']`` where the batches carry
        them), dropout on when ``train``."""
        rngs = {"dropout": rng} if train else {}
        args = () if memory is None else (memory,)
        chars = {"token_chars_BTL": batch[CHARS]} if CHARS in batch else {}
        out = model.apply(
            {"params": params}, batch["inputs"], *args, **chars, rngs=rngs,
            deterministic=not train,
        )  # fmt: skip
        return out if memory is not None else (out, None)

    def sums(self, outputs, batch) -> dict[str, Any]:
        """Float32 scalar sums of one batch (``sum_keys``); default: weighted cross-entropy
        and correct predictions of ``outputs`` (logits) against ``batch['targets']``."""
        return losses.cross_entropy_sums(outputs, batch["targets"], batch["weights"])

    def batch_sums(self, model, params, batch, *, rng, train: bool, memory=None):
        """``(sums, new_memory)``: ``apply`` then ``sums``."""
        outputs, new_memory = self.apply(model, params, batch, rng=rng, train=train,
                                         memory=memory)  # fmt: skip
        return self.sums(outputs, batch), new_memory

    def zero_sums(self) -> dict[str, Any]:
        """The accumulator before the first (micro-)batch: float32 zeros."""
        return {k: jnp.zeros((), jnp.float32) for k in self.sum_keys}

    def train_metrics(self, sums, total_weight) -> dict[str, Any]:
        """Logged train metrics (before grad_norm, ...): ``loss`` = loss_sum / weights and
        ``accuracy`` = correct_sum / weights."""
        return {"loss": sums["loss_sum"] / total_weight,
                "accuracy": sums["correct_sum"] / total_weight}  # fmt: skip

    def eval_summary(self, sums, config) -> dict[str, float]:
        """A split's summary from its (host) sums: loss, accuracy, count."""
        del config
        w = max(float(sums["weight_sum"]), 1.0)
        loss = float(sums["loss_sum"]) / w
        return {"loss": loss, "accuracy": float(sums["correct_sum"]) / w, "count": float(w)}

    def decode_metrics(self, run, params, split: str, *, max_batches: int = 0) -> dict:
        """Metrics that need decoding the whole split (BLEU/chrF over beam search), called by
        the evaluator after the loss pass on every process; merged into its summary.
        Default: none."""
        del run, params, split, max_batches
        return {}

    def eval_pictures(self, run, params, split: str, *, num: int, seed: int = 0) -> dict:
        """Pictures of the model at an evaluation of ``split``: ``{name: uint8 [H, W, C]}``
        (C = 1 or 3)
        (image generation: a grid of ``num`` sampled images; pixel classification: ``num``
        inputs with their predicted and true labels). The loop calls it on every process
        with the full parameters and writes the pictures on process 0 as
        ``<workdir>/<name>/step_XXXXXX.png`` and TensorBoard images tagged ``name``.
        Default: none."""
        del run, params, split, num, seed
        return {}

    # ---- throughput ----------------------------------------------------------------------

    def tokens_per_step(self, config) -> int:
        """``unit``s per training step (the progress rate and ``tokens_per_s``)."""
        return int(config.data.batch_size) * self.input_length(config)

    def flops_per_step(self, run) -> float:
        """Analytic model FLOPs of one training step (``seqjax.models.flops``)."""
        from seqjax.models import flops

        own = getattr(run.model, "train_flops_per_step", None)  # a family's own count
        if own is not None:
            return own(run.abstract["params"], batch_size=run.config.data.batch_size,
                       seq_len=self.input_length(run.config))  # fmt: skip
        return flops.train_flops_per_step(
            run.model_cfg, run.abstract["params"], batch_size=run.config.data.batch_size,
            seq_len=run.config.data.seq_len, tied_output=False,
        )  # fmt: skip

    # ---- generation ----------------------------------------------------------------------

    def check_sample_inputs(self, run, prompt: str, length: int) -> None:
        """Raises ``seqjax.tasks.inputs.InputError`` for a prompt/length this run cannot
        sample (before anything compiles)."""
        del run, prompt, length

    def sample(
        self, run, params, prompt: str, length: int, *, temperature=1.0, top_k=0, top_p=1.0,
        seed=0,
    ) -> str:  # fmt: skip
        """The generated continuation of ``prompt`` (only where ``generates``): ``length``
        tokens at ``temperature``, from the ``top_k`` most probable (0 = all) within nucleus
        mass ``top_p`` (1 = all; Holtzman et al. 2020), checked by
        ``seqjax.decoding.check_sampling``."""
        raise NotImplementedError(f"task {self.name!r} does not generate")

    def describe_sample(self, prompt: str, text: str) -> str:
        """How a prompt and its generated text are shown (default: the continued text)."""
        return prompt + text

    def describe_data(self, config, info) -> str:
        """The run header's data line: the data set, what one example is and the split
        sizes in the data's own units (default: token windows of ``data.seq_len``)."""
        d = config.data
        return (f"{d.name}, windows of {self.input_length(config)} tokens, batch {d.batch_size}; "
                f"splits (tokens): {split_sizes(info)}")  # fmt: skip


def split_sizes(info) -> str:
    """``train 1,234, validation 56, test 78`` from ``DataInfo.split_sizes`` ('?' unknown,
    'endless' for a generated training split)."""
    out = []
    for split, n in (getattr(info, "split_sizes", None) or {}).items():
        if isinstance(n, (int, float)) and not isinstance(n, bool):
            out.append(f"{split} {int(n):,}")
        else:
            out.append(f"{split} {'endless' if n is None and split == 'train' else '?'}")
    return ", ".join(out) or "unknown"
