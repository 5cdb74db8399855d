"""The model families that ship with seqjax, registered with ``seqjax.models.registry``.

* ``transformer``: the pre-LN Transformer (Child et al. 2019 §5.2; post-LN BERT/GPT-2
  layouts through its import options): ``TransformerLM`` for language modelling, masked LM
  and image generation, ``TransformerClassifier`` for classification, the two-tower
  ``TwoTowerClassifier`` for pairs (LRA Retrieval). Its recurrent kinds
  (``config.model.kind``, ``seqjax.models.memory``: Transformer-XL) train a memory model.
* ``encoder_decoder``: the sequence-to-sequence Transformer of Vaswani et al. 2017 (and T5's
  layout through its import options).
"""

from __future__ import annotations

from seqjax.models import from_config, memory, registry
from seqjax.models.encoder_decoder_config import EncoderDecoderConfig
from seqjax.models.transformer import TransformerConfig


def _lm(cfg, *, task, decode=False):
    del task
    from seqjax.models.transformer import TransformerLM

    return TransformerLM(cfg, decode=decode)


def _encoder_only(kind: str):
    def build(cfg, *, task, decode=False):
        from seqjax.models.transformer import TransformerLM

        if decode:
            raise ValueError(f"the {kind} has no decoding mode")
        del task
        return TransformerLM(cfg)

    return build


def _classifier(cfg, *, task, decode=False):
    del task
    from seqjax.models.transformer import TransformerClassifier

    if decode:
        raise ValueError("the classifier has no decoding mode")
    return TransformerClassifier(cfg)


def _two_tower(cfg, *, task, decode=False):
    from seqjax.models.two_tower import TwoTowerClassifier

    if decode:
        raise ValueError("the two-tower classifier has no decoding mode")
    interaction = getattr(task, "interaction", "nli")
    return TwoTowerClassifier(cfg, interaction=interaction, mlp_dim=cfg.d_ff)


def _token_head(cfg, *, task, decode=False):
    del task
    from seqjax.models.token_heads import TokenHeadEncoder

    if decode:
        raise ValueError("the token-head encoder has no decoding mode")
    return TokenHeadEncoder(cfg)


def _cross_encoder(cfg, *, task, decode=False):
    del task
    from seqjax.models.token_heads import CrossEncoder

    if decode:
        raise ValueError("the cross-encoder has no decoding mode")
    return CrossEncoder(cfg)


def _gpt1_classifier(cfg, *, task, decode=False):
    del task
    from seqjax.models.gpt1 import CausalClassifier

    if decode:
        raise ValueError("GPT-1's classifier has no decoding mode")
    return CausalClassifier(cfg)


def _transformer_train_module(config, cfg, *, task):
    """A recurrent kind's model (Transformer-XL, with its memory), else the task's module."""
    rec = memory.recurrence(config)
    if rec is not None:
        return rec.train_model(cfg, config)
    return task.make_model(cfg)  # the task's own choice (its module, or the family's)


def _encoder_decoder(cfg, *, task, decode=False):
    del task
    from seqjax.models.encoder_decoder import EncoderDecoder

    return EncoderDecoder(cfg, decode=decode)


TRANSFORMER = registry.register(
    registry.Family(
        name="transformer",
        doc="seqjax's Transformer: decoder LM, encoder classifier, masked LM, two towers",
        config_class=TransformerConfig,
        build_config=from_config.transformer_from_needs,
        modules={
            "lm": _lm,
            "image_generation": _lm,
            "mlm": _encoder_only("masked-LM encoder"),
            "classification": _classifier,
            "pair_classification": _two_tower,
            "qa": _token_head,  # BERT's start/end head (seqjax.tasks.token_tasks)
            "tagging": _token_head,
            "cross_encoder": _cross_encoder,  # [CLS] A [SEP] B [SEP] (model.towers=1)
            "gpt1_finetune": _gpt1_classifier,  # last-token classifier + auxiliary LM
        },
        from_data=("vocab_size", "pad_id", "axial_shape", "causal", "num_classes"),
        hf_architectures=(
            "BertForMaskedLM",
            "BertForPreTraining",
            "RobertaForMaskedLM",
            "GPT2LMHeadModel",
            "DistilBertForMaskedLM",
            "OpenAIGPTLMHeadModel",
        ),  # fmt: skip
        train_module=_transformer_train_module,
        block_of=from_config.transformer_block,
    )
)

ENCODER_DECODER = registry.register(
    registry.Family(
        name="encoder_decoder",
        doc="the encoder-decoder Transformer of Vaswani et al. 2017 (T5's layout on import)",
        config_class=EncoderDecoderConfig,
        build_config=from_config.encoder_decoder_from_needs,
        modules={"seq2seq": _encoder_decoder},
        from_data=("vocab_size", "pad_id"),
        hf_architectures=("T5ForConditionalGeneration", "BartForConditionalGeneration"),
        block_of=from_config.encoder_decoder_block,
    )
)
