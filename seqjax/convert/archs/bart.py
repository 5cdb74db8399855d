"""BART as a Hugging Face architecture: ``BartForConditionalGeneration`` <-> ``EncoderDecoder``
with BART's layout options (rules and config translations: ``seqjax.convert.bart``; Lewis et
al. 2020)."""

from __future__ import annotations

from seqjax.convert import bart, registry

BART = registry.register(
    registry.Architecture(
        name="bart",
        architectures=("BartForConditionalGeneration",),
        model_type="bart",
        config=bart.bart_config,
        hf_config=bart.bart_hf_config,
        rules=bart.bart_rules,
        make_model=bart.make_model,
        example_inputs=registry.source_and_target_ids,
        family="encoder_decoder",
        max_length=lambda cfg: cfg.max_source_len,  # the tables hold 2 more rows
    )
)
