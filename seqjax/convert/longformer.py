"""The Longformer recipe for a longer context from a pretrained encoder (Beltagy et al.
2020, §5 "Pretraining and Finetuning"): keep every weight, extend the learned position table
by *copying* the pretrained positions (RoBERTa's 512 repeated up to 4,096: "copying 512
position embeddings from RoBERTa multiple times"; its ``position_offset`` rows stay in
front), and swap the attention for an efficient mechanism (§3: a sliding window plus global
tokens), then continue masked-LM pre-training at the longer length.

Legend: n the pretrained length (learned rows), f the factor, E width.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from seqjax.models.transformer import TransformerConfig, attention_cycle

POSITION_INITS = ("copy", "random")


def extend_context(
    cfg: TransformerConfig,
    params: dict,
    factor: int,
    *,
    attention: str = "dense",
    attention_options: dict | None = None,
    position_init: str = "copy",
    seed: int = 0,
) -> tuple[TransformerConfig, dict]:
    """``(cfg, params)`` of the same encoder for ``factor`` times its learned length, with
    ``attention`` (a mechanism name or comma-separated cycle, options by name as
    ``config.model.attention_options``).

    ``position_init="copy"`` tiles the n learned rows f times (Beltagy et al. 2020, §5);
    ``"random"`` draws the new table from N(0, 0.02²) (their "random position
    initialization" ablation, Table 5). Every other parameter is the same array.
    """
    if position_init not in POSITION_INITS:
        raise ValueError(f"position_init={position_init!r} is not one of {POSITION_INITS}")
    if cfg.positional != "learned":
        raise ValueError(
            f"model.positional={cfg.positional!r} has no learned table to extend; valid: "
            "['learned']"
        )
    if not isinstance(factor, int) or factor < 1:
        raise ValueError(f"factor={factor!r} must be an integer >= 1")
    table_LE = np.asarray(params["encoder"]["pos_embed"])
    offset = cfg.position_offset
    learned_nE = table_LE[offset:]
    if position_init == "copy":
        new_nE = np.tile(learned_nE, (factor, 1))
    else:
        rng = np.random.default_rng(seed)
        new_nE = 0.02 * rng.standard_normal((factor * len(learned_nE), table_LE.shape[1]))
    new_LE = np.concatenate([table_LE[:offset], new_nE.astype(table_LE.dtype)], axis=0)
    cycle = attention_cycle(attention, attention_options or {})
    new_cfg = dataclasses.replace(cfg, max_len=len(new_LE), attention=cycle)
    encoder = {**params["encoder"], "pos_embed": new_LE}
    return new_cfg, {**params, "encoder": encoder}
