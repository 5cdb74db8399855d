"""The classification baselines and the RNN classifier against PyTorch with copied weights:
BoW / CBOW / DAN as ``torch.nn.EmbeddingBag`` (sum or mean over each row's real tokens) and
linear layers, Kim's CNN as ``torch.nn.Conv1d`` + ReLU + max over the windows inside the
text, the bidirectional LSTM classifier as ``torch.nn.LSTM`` on packed rows; padding never
counts; DAN's word dropout acts in training only.

Legend: B batch, T time, E embedding width, C classes, V vocabulary.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.convert import torch_rnn
from seqjax.models.baselines import ARCHITECTURES, BaselineClassifier, BaselineConfig
from seqjax.models.rnn import RNNConfig
from seqjax.models.rnn_classifier import RNNClassifier

torch = pytest.importorskip("torch")
B, T, E, C, V = 3, 9, 8, 3, 30
LENGTHS = np.array([9, 5, 2])


def _tokens():
    x = np.random.default_rng(0).integers(1, V, size=(B, T)).astype(np.int32)
    x[np.arange(T)[None] >= LENGTHS[:, None]] = 0
    return x


def _model(architecture, **kw):
    cfg = BaselineConfig(vocab_size=V, num_classes=C, pad_id=0, architecture=architecture,
                         embed_dim=E, hidden_dim=E, filter_widths=(2, 3), num_filters=4,
                         **kw)  # fmt: skip
    model = BaselineClassifier(cfg)
    params = model.init(jax.random.PRNGKey(0), jnp.asarray(_tokens()))["params"]
    return model, jax.tree.map(np.array, params)


def _bag(tokens, table, mode):
    bag = torch.nn.EmbeddingBag.from_pretrained(torch.as_tensor(table), mode=mode)
    flat = torch.as_tensor(np.concatenate([r[:n] for r, n in zip(tokens, LENGTHS)])).long()
    offsets = torch.as_tensor(np.concatenate([[0], np.cumsum(LENGTHS)[:-1]])).long()
    return bag(flat, offsets)


def _dense(x, p):
    return x @ torch.as_tensor(p["kernel"]) + torch.as_tensor(p["bias"])


@pytest.mark.parametrize("architecture", ["bow", "cbow", "deep_cbow", "dan"])
def test_bag_models_equal_torch_embedding_bag(architecture):
    model, p = _model(architecture)
    tokens = _tokens()
    got = model.apply({"params": p}, tokens)
    with torch.no_grad():
        z = _bag(tokens, p["embed"]["embedding"], "mean" if architecture == "dan" else "sum")
        if architecture == "bow":
            want = z + torch.as_tensor(p["bias"])
        else:
            act = torch.relu if architecture == "dan" else torch.tanh
            for i in range(2 if architecture != "cbow" else 0):
                z = act(_dense(z, p[f"layer_{i}"]))
            want = _dense(z, p["head"])
    np.testing.assert_allclose(got, want.numpy(), atol=2e-5)


def test_kim_cnn_equals_torch_conv1d_max_over_time():
    model, p = _model("cnn")
    tokens = _tokens()
    got = model.apply({"params": p}, tokens)
    with torch.no_grad():
        x = torch.as_tensor(p["embed"]["embedding"])[torch.as_tensor(tokens).long()]
        x = (x * torch.as_tensor(tokens != 0)[..., None]).transpose(1, 2)  # [B, E, T]
        feats = []
        for w in (2, 3):
            conv = torch.nn.Conv1d(E, 4, w)
            conv.weight.copy_(torch.as_tensor(p[f"conv_{w}"]["kernel"]).permute(2, 1, 0))
            conv.bias.copy_(torch.as_tensor(p[f"conv_{w}"]["bias"]))
            h = torch.relu(conv(x))  # [B, F, T - w + 1]
            feats.append(torch.stack([h[b, :, : max(n - w + 1, 1)].max(-1).values
                                      for b, n in enumerate(LENGTHS)]))  # fmt: skip
        want = _dense(torch.cat(feats, -1), p["head"])
    np.testing.assert_allclose(got, want.numpy(), atol=2e-5)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_padding_never_counts(architecture):
    model, p = _model(architecture)
    tokens = _tokens()
    longer = np.concatenate([tokens, np.zeros((B, 4), np.int32)], 1)
    np.testing.assert_allclose(
        model.apply({"params": p}, tokens), model.apply({"params": p}, longer), atol=1e-5
    )


def test_dan_word_dropout_only_in_training():
    model, p = _model("dan", word_dropout=0.5)
    tokens = jnp.asarray(_tokens())
    a = model.apply({"params": p}, tokens, deterministic=False, rngs={"dropout": jax.random.key(1)})
    b = model.apply({"params": p}, tokens, deterministic=False, rngs={"dropout": jax.random.key(2)})
    ev = model.apply({"params": p}, tokens)
    assert float(jnp.abs(a - b).max()) > 1e-4
    np.testing.assert_allclose(ev, model.apply({"params": p}, tokens), atol=0)


def test_bidirectional_lstm_classifier_equals_torch():
    from torch.nn.utils.rnn import pack_padded_sequence

    torch.manual_seed(0)
    cfg = RNNConfig(vocab_size=V, num_classes=C, pad_id=0, cell="lstm", num_layers=1,
                    hidden_dim=E, bidirectional=True, pooling="last")  # fmt: skip
    ref = torch.nn.LSTM(E, E, batch_first=True, bidirectional=True)
    model = RNNClassifier(cfg)
    tokens = _tokens()
    p = jax.tree.map(np.array, model.init(jax.random.PRNGKey(0), tokens)["params"])
    p["rnn"] = torch_rnn.stack_from_torch(ref.state_dict(), "lstm", 1, True)
    got = model.apply({"params": p}, tokens)
    with torch.no_grad():
        x = torch.as_tensor(p["embed"]["embedding"])[torch.as_tensor(tokens).long()]
        packed = pack_padded_sequence(x, torch.as_tensor(LENGTHS), batch_first=True,
                                      enforce_sorted=False)  # fmt: skip
        _, (h_n, _) = ref(packed)
        want = _dense(torch.cat([h_n[0], h_n[1]], -1), p["head"])
    np.testing.assert_allclose(got, want.numpy(), atol=2e-5)
