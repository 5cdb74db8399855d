"""BERT's pre-training heads and fine-tuning heads in the Hugging Face layout (Devlin et al.
2019): the pooler and next-sentence classifier of ``BertForPreTraining`` (``bert.pooler``,
``cls.seq_relationship`` <-> ``pair_head/{pooler, classifier}`` of ``TransformerLM``), and
the per-token heads of ``BertForQuestionAnswering`` (``qa_outputs``) and
``BertForTokenClassification`` (``classifier``) <-> ``token_heads.TokenHeadEncoder``'s
``head``. The encoder's rules are ``encoders.bert_rules``.
"""

from __future__ import annotations

import dataclasses

from seqjax.convert import encoders
from seqjax.convert import mapping as m
from seqjax.models.token_heads import TokenHeadEncoder

PRETRAINING = "BertForPreTraining"
QA, TOKENS = "BertForQuestionAnswering", "BertForTokenClassification"


def _dense(sx, hf):
    return [m.linear((*sx, "kernel"), hf + ".weight"), m.copy((*sx, "bias"), hf + ".bias")]


def _first_arch(hf: dict) -> str:
    return (list(hf.get("architectures") or []) or [""])[0]


def pretraining_config(hf: dict, max_len: int | None = None):
    """BERT's config, with the pooler and next-sentence head for ``BertForPreTraining``."""
    cfg = encoders.bert_config(hf, False, max_len)
    return dataclasses.replace(cfg, pair_head=_first_arch(hf) == PRETRAINING)


def pretraining_hf_config(cfg) -> dict:
    """BERT's ``config.json``: ``BertForPreTraining`` with the pair head, else masked LM."""
    out = encoders.bert_hf_config(cfg, False)
    if cfg.pair_head:
        out["architectures"] = [PRETRAINING]
    return out


def pretraining_rules(cfg, prefix: str | None = None, tensors=None) -> list:
    """BERT's masked-LM rules plus, with ``cfg.pair_head``, the pooler (``{prefix}pooler.
    dense``) and the next-sentence classifier (``cls.seq_relationship``)."""
    rules = encoders.bert_rules(cfg, False, prefix, tensors)
    if cfg.pair_head:
        p = "bert." if prefix is None else prefix
        rules += _dense(("pair_head", "pooler"), p + "pooler.dense")
        rules += _dense(("pair_head", "classifier"), "cls.seq_relationship")
    return rules


# --- fine-tuning heads -------------------------------------------------------------------

HEAD_TENSOR = {QA: "qa_outputs", TOKENS: "classifier"}


def head_config(arch: str):
    def config(hf: dict, max_len: int | None = None):
        cfg = encoders.bert_config(hf, False, max_len)
        labels = hf.get("id2label")
        classes = len(labels) if labels else hf.get("num_labels", 2)
        if arch == QA and classes != 2:
            raise ValueError(
                f"config.json num_labels={classes} is not supported for {QA}; valid: [2] "
                "(a start and an end logit)"
            )
        return dataclasses.replace(cfg, mlm_head_transform=False, num_classes=classes)

    return config


def head_hf_config(arch: str):
    def hf_config(cfg) -> dict:
        out = encoders.bert_hf_config(cfg, False)
        out["architectures"] = [arch]
        out["id2label"] = {str(i): f"LABEL_{i}" for i in range(cfg.num_classes)}
        return out

    return hf_config


def head_rules(arch: str):
    def rules(cfg, prefix: str | None = None, tensors=None) -> list:
        enc = [r for r in encoders.bert_rules(cfg, False, prefix, tensors)
               if all(p[0] == "encoder" for p in r.sx)]  # fmt: skip
        return enc + _dense(("head",), HEAD_TENSOR[arch])

    return rules


def make_token_head(cfg) -> TokenHeadEncoder:
    return TokenHeadEncoder(cfg)
