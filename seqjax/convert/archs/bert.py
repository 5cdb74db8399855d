"""BERT and RoBERTa as Hugging Face architectures: masked-LM encoders <-> ``TransformerLM``
(the rules and config translations are ``seqjax.convert.encoders``'; Devlin et al. 2019,
Liu et al. 2019).

Read: ``BertForMaskedLM``, ``BertForPreTraining`` (``bert-base-uncased`` carries it; its
next-sentence head and pooler stay unused), ``BertModel`` (a bare encoder: the masked-LM head
is initialised), ``RobertaForMaskedLM``, ``RobertaModel``. The original TensorFlow port's
``LayerNorm.gamma`` / ``LayerNorm.beta`` tensor names (``bert-base-uncased``'s) are read as
``LayerNorm.weight`` / ``LayerNorm.bias``.
"""

from __future__ import annotations

from seqjax.convert import encoders, registry

LEGACY_NORM = {".LayerNorm.gamma": ".LayerNorm.weight", ".LayerNorm.beta": ".LayerNorm.bias"}


def legacy_names(hf_cfg: dict, tensors: dict) -> tuple[dict, dict]:
    """``tensors`` with the TensorFlow port's ``LayerNorm.gamma/beta`` renamed to
    ``LayerNorm.weight/bias`` (a file with both keeps the new names)."""
    out = {}
    for name, array in tensors.items():
        for old, new in LEGACY_NORM.items():
            if name.endswith(old) and name[: -len(old)] + new not in tensors:
                name = name[: -len(old)] + new
                break
        out[name] = array
    return hf_cfg, out


def _encoder(name: str, architectures: tuple[str, ...], roberta: bool) -> registry.Architecture:
    return registry.Architecture(
        name=name,
        architectures=architectures,
        model_type=name,
        config=lambda hf, max_len=None: encoders.bert_config(hf, roberta, max_len),
        hf_config=lambda cfg: encoders.bert_hf_config(cfg, roberta),
        rules=lambda cfg, prefix=None, tensors=None: encoders.bert_rules(
            cfg, roberta, prefix, tensors
        ),
        make_model=encoders.make_model,
        prefix_anchor="embeddings.word_embeddings.weight",
        fix_tensors=legacy_names,
        optional=("mlm_head",),
        family="transformer_lm",
    )


BERT = registry.register(
    _encoder("bert", ("BertForMaskedLM", "BertForPreTraining", "BertModel"), roberta=False)
)
ROBERTA = registry.register(
    _encoder("roberta", ("RobertaForMaskedLM", "RobertaModel"), roberta=True)
)
