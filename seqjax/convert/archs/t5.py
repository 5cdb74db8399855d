"""T5 as a Hugging Face architecture: an encoder-decoder <-> ``EncoderDecoder`` (the rules and
config translations are ``seqjax.convert.t5``'; Raffel et al. 2020).

Read: ``T5ForConditionalGeneration`` and ``T5WithLMHeadModel`` (the name ``t5-small``,
``t5-base`` and ``t5-large`` carry). Whether the output layer is tied is read from the
weights too: a file whose ``lm_head.weight`` differs from ``shared.weight`` is untied whatever
its ``config.json`` says.
"""

from __future__ import annotations

import numpy as np

from seqjax.convert import registry
from seqjax.convert import t5 as t5_layout


def untied_from_weights(hf_cfg: dict, tensors: dict) -> tuple[dict, dict]:
    """``tie_word_embeddings=False`` when the file holds a separate, different output layer."""
    if "lm_head.weight" in tensors and "shared.weight" in tensors:
        if not np.array_equal(tensors["lm_head.weight"], tensors["shared.weight"]):
            hf_cfg = {**hf_cfg, "tie_word_embeddings": False}
    return hf_cfg, tensors


T5 = registry.register(
    registry.Architecture(
        name="t5",
        architectures=("T5ForConditionalGeneration", "T5WithLMHeadModel"),
        model_type="t5",
        config=t5_layout.t5_config,
        hf_config=t5_layout.t5_hf_config,
        rules=lambda cfg, prefix=None, tensors=None: t5_layout.t5_rules(cfg),
        make_model=t5_layout.make_model,
        example_inputs=registry.source_and_target_ids,
        fix_tensors=untied_from_weights,
        family="encoder_decoder",
    )
)
