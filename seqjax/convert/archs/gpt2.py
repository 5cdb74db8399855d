"""GPT-2 as a Hugging Face architecture: a decoder LM <-> ``TransformerLM`` (the rules and
config translations are ``seqjax.convert.encoders``'; Radford et al. 2019).

Read: ``GPT2LMHeadModel`` and ``GPT2Model`` (a bare decoder: the output layer is the tied
token table; an untied one is initialised).
"""

from __future__ import annotations

from seqjax.convert import encoders, registry

GPT2 = registry.register(
    registry.Architecture(
        name="gpt2",
        architectures=("GPT2LMHeadModel", "GPT2Model"),
        model_type="gpt2",
        config=encoders.gpt2_config,
        hf_config=encoders.gpt2_hf_config,
        rules=lambda cfg, prefix=None, tensors=None: encoders.gpt2_rules(
            cfg, "transformer." if prefix is None else prefix
        ),
        make_model=encoders.make_model,
        prefix_anchor="wte.weight",
        optional=("head",),
        family="transformer_lm",
    )
)
