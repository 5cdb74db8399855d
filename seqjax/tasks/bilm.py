"""ELMo's bidirectional language model (``DataInfo.task`` 'bilm', chosen with
``config.data.objective = 'bilm'``; Peters et al. 2018 §3.1, eq. before (1)): a forward and
a backward LM trained together as separate LMs (the ``elmo`` family: one token encoder
and one softmax shared, the LSTMs their own), maximising
``Σ_k log p(t_k | t_1..t_{k-1}) + log p(t_k | t_{k+1}..t_N)``.

On a row of ``inputs`` ``x_0..x_{T-1}`` the forward LM at position t predicts ``x_{t+1}``
and the backward LM ``x_{t-1}`` (t = 0..T-2 and 1..T-1: the same T-1 tokens each way, so
``loss = ½ (Σ NLL_forward + Σ NLL_backward) / Σ w`` is the mean of the two LMs' mean
NLLs). The weights are the LM's (``weights[t]`` of the target ``x_{t+1}``, 0 past a padded
row's end, and 0 in the last column: ``seqjax.data.bilm``), the backward target
``x_{t-1}`` taking ``weights[t-1]``; ``Σ w`` is then each LM's count of predictions, the
train step's denominator.

Batches: ``inputs``, ``targets``, ``weights`` ``[B, T]`` (the LM's) and ``token_chars``
int32 ``[B, T, L]`` (``seqjax.data.token_chars``). Evaluation: the loss, accuracy and each
LM's perplexity.

Legend: B batch, T window, L characters per token, V vocabulary.
"""

from __future__ import annotations

import math

from seqjax.tasks import base, losses, registry


class BidirectionalLM(base.Task):
    name = "bilm"
    objective = "bilm"
    family = "elmo"
    causal = True  # each LM is causal in its own direction
    batch_fields = {
        "inputs": ("int32", 2),
        "targets": ("int32", 2),
        "weights": ("float32", 2),
        base.CHARS: ("int32", 3),
    }
    sum_keys = (*base.SUM_KEYS, "forward_loss_sum", "backward_loss_sum")

    def input_length(self, config) -> int:
        """``data.seq_len`` (corpus windows) or ``data.max_len`` (example texts)."""
        from seqjax.data import api as data_api
        from seqjax.data import bilm

        return data_api.max_len(config.data) if bilm.is_texts(config.data) else int(
            config.data.seq_len)  # fmt: skip

    def init_shapes(self, config, info) -> tuple:
        """The tokens ``[1, T]`` and their characters ``[1, T, L]``."""
        del info
        t = self.input_length(config)
        return ((1, t), (1, t, int(config.data.get("token_chars") or 1)))

    def sums(self, outputs, batch) -> dict:
        """The two LMs' weighted sums (module docstring) and each one's loss sum."""
        fwd_BTV, bwd_BTV = outputs
        x_BT, w_BT = batch["inputs"], batch["weights"]
        f = losses.cross_entropy_sums(fwd_BTV[:, :-1], x_BT[:, 1:], w_BT[:, :-1])
        b = losses.cross_entropy_sums(bwd_BTV[:, 1:], x_BT[:, :-1], w_BT[:, :-1])
        return {
            "loss_sum": 0.5 * (f["loss_sum"] + b["loss_sum"]),
            "correct_sum": 0.5 * (f["correct_sum"] + b["correct_sum"]),
            "weight_sum": f["weight_sum"],  # = Σ weights (the last column is 0)
            "forward_loss_sum": f["loss_sum"],
            "backward_loss_sum": b["loss_sum"],
        }

    def train_metrics(self, sums, total_weight) -> dict:
        out = super().train_metrics(sums, total_weight)
        out["forward_loss"] = sums["forward_loss_sum"] / total_weight
        out["backward_loss"] = sums["backward_loss_sum"] / total_weight
        return out

    def eval_summary(self, sums, config) -> dict:
        out = super().eval_summary(sums, config)
        w = max(float(sums["weight_sum"]), 1.0)
        for side in ("forward", "backward"):
            loss = float(sums[f"{side}_loss_sum"]) / w
            out[f"{side}_loss"] = loss
            out[f"{side}_perplexity"] = math.exp(min(loss, 700.0))
        return out

    def describe_data(self, config, info) -> str:
        d = config.data
        return (f"{d.name}, forward and backward LM on rows of {self.input_length(config)} "
                f"tokens of {d.get('token_chars')} characters, batch {d.batch_size}; splits: "
                f"{base.split_sizes(info)}")  # fmt: skip


TASK = registry.register(BidirectionalLM())
