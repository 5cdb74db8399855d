"""BERT's fine-tuning heads as Hugging Face architectures: ``BertForQuestionAnswering``
(start/end logits) and ``BertForTokenClassification`` (per-token labels) <->
``seqjax.models.token_heads.TokenHeadEncoder`` (rules: ``seqjax.convert.bert_heads``)."""

from __future__ import annotations

from seqjax.convert import bert_heads as bh
from seqjax.convert import registry


def _head(name: str, arch: str) -> registry.Architecture:
    return registry.Architecture(
        name=name,
        architectures=(arch,),
        model_type="bert",
        config=bh.head_config(arch),
        hf_config=bh.head_hf_config(arch),
        rules=bh.head_rules(arch),
        make_model=bh.make_token_head,
        prefix_anchor="embeddings.word_embeddings.weight",
    )


BERT_QA = registry.register(_head("bert_qa", bh.QA))
BERT_TOKENS = registry.register(_head("bert_tokens", bh.TOKENS))
