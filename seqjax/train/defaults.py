"""Default blocks of a job config (every field commented); config files override them.

A job config is an ``ml_collections.ConfigDict`` with

- ``seed``: parameter init and dropout seed;
- ``data``: ``seqjax.data.default_config()`` (documented in ``seqjax/data/config.py``);
- ``model``, ``optimizer``, ``train``, ``eval``, ``mesh``: the blocks below.
"""

from __future__ import annotations

import ml_collections
from ml_collections import config_dict


def model() -> ml_collections.ConfigDict:
    """``config.model`` (becomes a ``seqjax.models.TransformerConfig``; vocabulary size,
    number of classes, padding id and causality come from the data)."""
    c = ml_collections.ConfigDict()
    # The model family (seqjax.models.registry.names(): "transformer", "encoder_decoder",
    # ...); "auto" = the data's task's own (the encoder-decoder for translation, else the
    # Transformer). A family's config file starts from seqjax.models.registry.model_block.
    c.family = "auto"
    # "transformer" (seqjax.models.TransformerLM / TransformerClassifier) or "transformer_xl"
    # (seqjax.models.transformer_xl.TransformerXL, Dai et al. 2019: segment recurrence; needs
    # data.lm_batching="stream", attention="relative", positional="none").
    c.kind = "transformer"
    # Transformer-XL: hidden states kept in memory per layer (M), carried from step to step
    # in the train state. 0 = no recurrence. Must stay 0 for kind="transformer".
    c.mem_len = 0
    # Attention: a registered name (seqjax.attention.names()) or a comma-separated per-layer
    # cycle such as "lsh,dense" (layer i uses entry i mod len).
    c.attention = "dense"
    # Options per mechanism name, e.g. attention_options.dense.implementation = "chunked".
    # Keys must be mechanism names; each mechanism validates its own option names.
    c.attention_options = ml_collections.ConfigDict(
        {"dense": ml_collections.ConfigDict({"implementation": "auto"})}
    )
    c.num_layers = 2  # N Transformer blocks
    c.num_heads = 4  # H attention heads
    c.d_model = 128  # E model width
    c.head_dim = 0  # D per head; 0 = d_model // num_heads
    c.d_ff = 0  # feed-forward width; 0 = 4 * d_model
    c.max_len = 256  # longest input (positions, decode cache); >= data.seq_len / max_len
    c.dropout_rate = 0.0  # residual and embedding dropout
    c.attention_dropout_rate = 0.0  # dropout on attention probabilities
    c.positional = "sinusoidal"  # "sinusoidal" | "learned" | "none"
    # ... or in the attention: "rope" | "alibi" | "t5_bias" (seqjax/attention/score_mod.py)
    c.rope_base = 10000.0  # RoPE's base (Su et al. 2021)
    c.t5_buckets = 32  # T5 relative-bias buckets (Raffel et al. 2020)
    c.t5_max_distance = 128  # T5 relative bias: distances beyond share the last bucket
    # Adaptive input + adaptive softmax (Baevski & Auli 2019; Grave et al. 2017) as in
    # Transformer-XL: cluster boundaries, width divisor per cluster, tied projections.
    c.adaptive = ml_collections.ConfigDict(
        {"enabled": False, "cutoffs": (), "div_val": 1, "tie_projs": True}
    )
    c.tie_embeddings = True  # LM logits use the token embedding matrix
    # compute dtype: "auto" (bfloat16 on GPU/TPU, float32 on CPU; seqjax.models.dtype) |
    # "float32" | "bfloat16" | "float16"; parameters and optimizer state stay float32
    c.dtype = "auto"
    c.ff_chunk_size = 0  # feed-forward over chunks of this many positions (0 = whole)
    c.remat = False  # rematerialize each block in the backward pass (less memory)
    c.reversible = False  # reversible residual layers (Reformer)
    c.pooling = "mean"  # classifier pooling: "mean" over non-pad tokens | "cls"
    # Masked LM (data.objective='mlm'): BERT's head transform dense -> GELU -> LayerNorm
    # before the (tied) output layer + bias (seqjax.models.transformer.MLMHead).
    c.mlm_head_transform = True
    # Pair data (aan, l10n_pairs; seqjax.models.two_tower, LRA Retrieval): 2 = one shared
    # encoder on both documents; single-input data sets need 1.
    c.towers = 1
    c.pair_interaction = "nli"  # two-tower head input: "nli" [u, v, u*v, u-v] | "concat" [u, v]
    # Encoder-decoder (seq2seq data; seqjax.models.EncoderDecoder, Vaswani et al. 2017):
    # `attention` and `num_layers` are the encoder's; these are the decoder's and the rest.
    c.decoder_attention = "dense"  # decoder self-attention cycle (causal mechanisms)
    c.decoder_layers = 0  # decoder layers; 0 = num_layers
    c.norm_position = "post"  # "post" (the paper: LayerNorm(x + Sublayer(x))) | "pre"
    c.share_embeddings = True  # one source/target embedding (shared vocabulary, §3.4)
    return c


def optimizer() -> ml_collections.ConfigDict:
    """``config.optimizer``: clip by global norm, then an optax optimizer on a schedule
    (``seqjax/train/optim.py`` documents every name and schedule); the default is AdamW on
    warm-up + cosine decay."""
    c = ml_collections.ConfigDict()
    c.name = "adamw"  # adamw | adam | adafactor | sgd | lamb
    # warmup_cosine | warmup_linear | constant | rsqrt (LRA) | inverse_sqrt (Vaswani et al.)
    c.schedule = "warmup_cosine"
    c.learning_rate = 1e-3  # peak rate (rsqrt: LRA's "constant"; peak = lr / sqrt(warmup))
    c.warmup_steps = 100  # linear warm-up from 0
    c.min_lr_ratio = 0.1  # cosine/linear decay to learning_rate * min_lr_ratio at num_steps
    c.b1 = 0.9  # Adam/LAMB beta1
    c.b2 = 0.99  # Adam/LAMB beta2
    c.eps = 1e-8  # Adam/LAMB epsilon
    c.weight_decay = 0.01  # weight decay (adamw/lamb: decoupled; sgd: L2; adam: must be 0)
    c.weight_decay_mask = "matrices"  # matrices (not biases / norms / u, v) | all | none
    c.momentum = 0.9  # sgd momentum (0 = plain SGD)
    c.nesterov = False  # sgd: Nesterov momentum
    # Adafactor (Shazeer & Stern 2018) as optax.adafactor; learning_rate is its step size.
    c.adafactor = ml_collections.ConfigDict(
        {
            "decay_rate": 0.8,  # second-moment decay exponent
            "clipping_threshold": 1.0,  # update clipping by block RMS (0 = none)
            "multiply_by_parameter_scale": True,  # relative step size
            "momentum": 0.0,  # first-moment EMA (0 = none, as in the paper)
            "eps": 1e-30,  # regularizes the squared gradient
            "min_dim_size_to_factor": 128,  # factor second moments of dims >= this
        }
    )
    # Parameter-path prefixes whose updates are 0 (optax.multi_transform + set_to_zero), e.g.
    # ("encoder",) for feature-based transfer; a prefix matching nothing is an error.
    c.freeze = ()
    c.grad_clip_norm = 1.0  # clip gradients to this global norm (0 = no clipping)
    # Split each global batch into this many sequential micro-batches (same update, less
    # memory); data.batch_size / (mesh.data * mesh.fsdp) must be divisible by it.
    c.grad_accum_steps = 1
    return c


def train() -> ml_collections.ConfigDict:
    """``config.train``: length of the run, logging, evaluation, checkpoints, sample."""
    c = ml_collections.ConfigDict()
    c.num_steps = 1000  # optimizer updates (also the cosine schedule length)
    c.log_every = 10  # write train metrics to metrics.jsonl / TensorBoard every N steps
    c.eval_every = 250  # validation every N steps (0 = only the final test evaluation)
    c.eval_max_batches = 20  # validation batches per evaluation during training (0 = all)
    c.eval_batch_size = 0  # global batch for evaluation (0 = data.batch_size)
    c.final_eval = True  # evaluate the test split at the end
    c.test_max_batches = 0  # test batches of that evaluation (0 = the whole split; smokes: a slice)
    c.checkpoint_every = 250  # save every N steps (0 = only at the end / on SIGTERM)
    c.max_to_keep = 3  # newest checkpoints kept
    c.async_checkpointing = True  # write checkpoints in the background while training
    # Stop (with a checkpoint) once this many steps are done, without changing the schedule
    # (time-sliced jobs; the resume tests). 0 = run to num_steps.
    c.stop_after = 0
    # Token-level label smoothing epsilon of sequence-to-sequence losses (Vaswani et al.: 0.1).
    c.label_smoothing = 0.0
    # LM cross-entropy in chunks of this many tokens, never the float32 [B, T, V] logits
    # (seqjax.models.chunked_xent): None = chunked where those logits would reach 256 MiB
    # on one device, 0 = the plain form (seqjax.tasks.lm).
    c.xent_chunk = config_dict.placeholder(int)
    # A task that generates (the LM; seqjax.tasks.Task.generates): the end-of-run sample
    # (a seq2seq task translates the prompt).
    c.sample_prompt = "def "  # prompt of the sample printed at the end
    c.sample_length = 200  # characters/tokens sampled at the end (0 = none)
    c.sample_temperature = 0.8  # sampling temperature (0 = greedy)
    # Trace steps [start, stop) with jax.profiler into <workdir>/profile (TensorBoard's
    # profile plugin / Perfetto), e.g. "10,20"; "" = off.
    c.profile_steps = ""
    # JAX's persistent compilation cache (seqjax.compile_cache): "auto" = jax_cache beside
    # the TFDS data (or $SEQJAX_COMPILATION_CACHE), a directory, or "off".
    c.compilation_cache = "auto"
    return c


def evaluation() -> ml_collections.ConfigDict:
    """``config.eval``: Transformer-XL evaluation lengths (Dai et al. 2019 evaluate enwik8
    with tgt_len 80, mem_len 2100, clamp_len 820, same_length). None = as in training.
    Ignored for kind="transformer"."""
    c = ml_collections.ConfigDict()
    c.tgt_len = config_dict.placeholder(int)  # tokens per evaluated segment (data.seq_len)
    c.mem_len = config_dict.placeholder(int)  # memory length at evaluation (model.mem_len)
    # Relative distances above this use clamp_len's embedding (-1 = no clamping; None = the
    # training value of attention_options.relative.clamp_len).
    c.clamp_len = config_dict.placeholder(int)
    # Every query sees exactly mem_len keys (None = the training value of
    # attention_options.relative.same_length).
    c.same_length = config_dict.placeholder(bool)
    # Sequence to sequence: beam search for BLEU/chrF and translation (Vaswani et al. §6.1).
    c.beam_size = 4  # beams (1 = greedy)
    c.length_penalty = 0.6  # GNMT length penalty exponent alpha (0 = none)
    c.decode_metrics = True  # BLEU/chrF of beam search in every evaluation (seq2seq)
    # Pictures at every evaluation (seqjax.tasks.Task.eval_pictures; image tasks): a grid of
    # sampled images (generation) or inputs with predicted/true labels (pixel classification),
    # as <workdir>/<name>/step_XXXXXX.png and TensorBoard images. Other tasks draw none.
    c.pictures = True
    c.num_pictures = 8  # images in each picture (1..64)
    return c


def mesh() -> ml_collections.ConfigDict:
    """``config.mesh``: sizes of the device mesh axes (-1 = the remaining devices)."""
    c = ml_collections.ConfigDict()
    c.data = -1  # data parallelism (parameters replicated)
    c.fsdp = 1  # data parallelism with parameters and optimizer state sharded
    c.tensor = 1  # tensor parallelism over heads / feed-forward width / vocabulary
    # context parallelism: activations split along the sequence; dense/causal attention runs
    # as ring or all-to-all attention (seqjax.attention.ring; other mechanisms refuse)
    c.sequence = 1
    return c


def base(data: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """A full job config around a ``config.data`` block."""
    c = ml_collections.ConfigDict()
    c.seed = 0  # parameter initialization and dropout
    # Pre-train -> fine-tune: a workdir (its newest checkpoint) or a checkpoint folder whose
    # encoder parameters initialise this model (seqjax.train.init_from); None = from scratch.
    c.init_from = config_dict.placeholder(str)
    # Modules imported before the config is validated and again by evaluate/sample/translate
    # (they register attention mechanisms or tasks; docs/extending.md); --import adds one.
    c.imports = ()
    c.data = data
    c.model = model()
    c.optimizer = optimizer()
    c.train = train()
    c.eval = evaluation()
    c.mesh = mesh()
    return c
