"""The distillation loss (``seqjax.tasks.distillation``) equals Hugging Face's
``distiller.py`` formula, computed with its torch loss modules (``KLDivLoss(batchmean)`` on
the selected positions times T², ``CrossEntropyLoss(ignore_index=-100)``,
``CosineEmbeddingLoss`` on the real positions), on fixed arrays for T in {1, 2}."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.tasks import distillation

torch = pytest.importorskip("torch")
B, T, V, E = 3, 7, 11, 5


def _arrays(seed=0):
    rng = np.random.default_rng(seed)
    s, t = rng.normal(size=(B, T, V)) * 2, rng.normal(size=(B, T, V)) * 2
    hs, ht = rng.normal(size=(B, T, E)), rng.normal(size=(B, T, E))
    attn = np.ones((B, T), np.int64)
    attn[0, 5:] = 0
    attn[2, 3:] = 0
    labels = np.where(rng.random((B, T)) < 0.4, rng.integers(0, V, (B, T)), -100)
    labels[attn == 0] = -100
    labels[1, 1] = 4  # at least one label
    return [a.astype(np.float32) for a in (s, t, hs, ht)] + [attn, labels]


def _reference(s, t, hs, ht, attn, labels, temp, a_ce, a_mlm, a_cos, restrict):
    nn = torch.nn
    s, t, hs, ht = map(torch.from_numpy, (s, t, hs, ht))
    attn, labels = torch.from_numpy(attn), torch.from_numpy(labels)
    mask = ((labels > -1) if restrict else attn.bool()).unsqueeze(-1).expand_as(s)
    s_sel = torch.masked_select(s, mask).view(-1, V)
    t_sel = torch.masked_select(t, mask).view(-1, V)
    ce = (
        nn.KLDivLoss(reduction="batchmean")(
            nn.functional.log_softmax(s_sel / temp, dim=-1),
            nn.functional.softmax(t_sel / temp, dim=-1),
        )
        * temp**2
    )
    loss = a_ce * ce
    loss = loss + a_mlm * nn.CrossEntropyLoss(ignore_index=-100)(s.view(-1, V), labels.view(-1))
    hmask = attn.bool().unsqueeze(-1).expand_as(hs)
    hs_sel, ht_sel = (torch.masked_select(h, hmask).view(-1, E) for h in (hs, ht))
    target = hs_sel.new(hs_sel.size(0)).fill_(1)
    loss = loss + a_cos * nn.CosineEmbeddingLoss(reduction="mean")(hs_sel, ht_sel, target)
    return float(loss)


@pytest.mark.parametrize("temp", [1.0, 2.0])
@pytest.mark.parametrize("restrict", [False, True])
def test_loss_equals_distiller_formula(temp, restrict):
    s, t, hs, ht, attn, labels = _arrays()
    weights = (labels > -1).astype(np.float32)
    ours, parts = distillation.distillation_loss(
        jnp.asarray(s), jnp.asarray(t), labels_BT=jnp.asarray(np.maximum(labels, 0)),
        label_weights_BT=jnp.asarray(weights), attention_mask_BT=jnp.asarray(attn),
        s_hidden_BTE=jnp.asarray(hs), t_hidden_BTE=jnp.asarray(ht), temperature=temp,
        alpha_ce=5.0, alpha_mlm=2.0, alpha_cos=1.0, restrict_ce_to_mask=restrict,
    )  # fmt: skip
    want = _reference(s, t, hs, ht, attn, labels, temp, 5.0, 2.0, 1.0, restrict)
    np.testing.assert_allclose(float(ours), want, rtol=2e-5)
    assert set(parts) == {"ce", "mlm", "cos"} and float(parts["ce"]) > 0


def test_bad_temperature():
    s, t, *_ = _arrays()
    with pytest.raises(ValueError, match="temperature=0"):
        distillation.distillation_loss(
            s, t, labels_BT=None, label_weights_BT=None, attention_mask_BT=None, temperature=0
        )
