"""ELMo's parts against references: the projected LSTM against ``torch.nn.LSTM(proj_size=P)``
(both directions, padded rows), and the highway layers, the character CNN and the scalar mix
against small ports of AllenNLP's ``Highway``, ``_ElmoCharacterEncoder`` (forward) and
``ScalarMix`` written with torch ops and the same weights.

Legend: B batch, T tokens, L characters, I input, H cells, P projection.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.convert import torch_rnn
from seqjax.models.elmo import BiLM, CharCNN, Highway, ProjectedLSTMCell, ScalarMix

torch = pytest.importorskip("torch")
B, T, I, H, P = 3, 6, 5, 8, 4
LENGTHS = np.array([6, 3, 1])


def test_projected_lstm_equals_torch_proj_size_both_directions():
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    torch.manual_seed(0)
    ref = torch.nn.LSTM(I, H, proj_size=P, batch_first=True, bidirectional=True)
    x = torch.randn(B, T, I)
    with torch.no_grad():
        out, (h_n, c_n) = ref(pack_padded_sequence(x, torch.as_tensor(LENGTHS), batch_first=True,
                                                   enforce_sorted=False))  # fmt: skip
        want = pad_packed_sequence(out, batch_first=True, total_length=T)[0].numpy()
    sd, x_j, lengths = ref.state_dict(), jnp.asarray(x.numpy()), jnp.asarray(LENGTHS)
    valid = np.arange(T)[None] < LENGTHS[:, None]
    backward = {"reverse": True, "keep_order": True}
    for d, (suffix, kw) in enumerate((("_l0", {}), ("_l0_reverse", backward))):
        params = torch_rnn.cell_from_torch(sd, "lstm", suffix, projection=True)
        rnn = nn.RNN(ProjectedLSTMCell(H, P), return_carry=True, **kw)
        (c, r), y = rnn.apply({"params": {"cell": params}}, x_j, seq_lengths=lengths)
        np.testing.assert_allclose(np.asarray(y)[valid], want[..., d * P : (d + 1) * P][valid],
                                   atol=2e-6)  # fmt: skip
        np.testing.assert_allclose(r, h_n[d].numpy(), atol=2e-6)
        np.testing.assert_allclose(c, c_n[d].numpy(), atol=2e-6)
    with pytest.raises(ValueError, match="projection=True"):
        torch_rnn.cell_from_torch(sd, "lstm", "_l0")


def _allennlp_highway(x, layers):
    """AllenNLP's Highway.forward: ``layers`` are torch ``Linear(D, 2D)``."""
    for layer in layers:
        nonlinear, gate = layer(x).chunk(2, dim=-1)
        gate = torch.sigmoid(gate)
        x = gate * x + (1 - gate) * torch.relu(nonlinear)
    return x


def _linears(params, names):
    out = []
    for name in names:
        k = torch.as_tensor(np.array(params[name]["kernel"]))
        lin = torch.nn.Linear(k.shape[0], k.shape[1])
        with torch.no_grad():
            lin.weight.copy_(k.T)
            lin.bias.copy_(torch.as_tensor(np.array(params[name]["bias"])))
        out.append(lin)
    return out


def test_highway_equals_allennlp_port():
    x = np.random.default_rng(0).normal(size=(B, 7)).astype(np.float32)
    module = Highway(7, num_layers=2)
    params = module.init(jax.random.PRNGKey(0), x)["params"]
    assert np.all(np.asarray(params["layer_0"]["bias"][7:]) == 1.0)  # carry the input at init
    params = jax.tree.map(lambda a: a + 0.1 * np.random.default_rng(1).normal(size=a.shape), params)
    got = module.apply({"params": params}, x)
    with torch.no_grad():
        want = _allennlp_highway(torch.as_tensor(x), _linears(params, ["layer_0", "layer_1"]))
    np.testing.assert_allclose(got, want.numpy(), atol=2e-6)


def test_char_cnn_equals_allennlp_character_encoder_port():
    filters = ((1, 4), (2, 3), (3, 5))
    chars = np.random.default_rng(2).integers(1, 20, size=(B, T, 7)).astype(np.int32)
    chars[..., 5:] = 0  # padded characters, as ELMo's 50-character rows
    module = CharCNN(num_chars=20, char_dim=6, filters=filters, num_highway=2, out_dim=10)
    params = jax.tree.map(np.array, module.init(jax.random.PRNGKey(0), chars)["params"])
    got = module.apply({"params": params}, chars)
    with torch.no_grad():  # _ElmoCharacterEncoder.forward: conv, max, activation, highway, proj
        x = torch.as_tensor(params["char_embed"]["embedding"])[torch.as_tensor(chars).long()]
        x = x.reshape(B * T, 7, 6).transpose(1, 2)
        convs = []
        for i, (w, n) in enumerate(filters):
            conv = torch.nn.Conv1d(6, n, w)
            conv.weight.copy_(torch.as_tensor(params[f"conv_{i}"]["kernel"]).permute(2, 1, 0))
            conv.bias.copy_(torch.as_tensor(params[f"conv_{i}"]["bias"]))
            convs.append(torch.relu(torch.max(conv(x), dim=-1).values))
        z = _allennlp_highway(torch.cat(convs, -1), _linears(params["highway"],
                                                             ["layer_0", "layer_1"]))  # fmt: skip
        want = _linears(params, ["projection"])[0](z).reshape(B, T, 10)
    np.testing.assert_allclose(got, want.numpy(), atol=2e-6)


def test_scalar_mix_equals_allennlp_port():
    rng = np.random.default_rng(3)
    layers = [rng.normal(size=(B, T, P)).astype(np.float32) for _ in range(3)]
    module = ScalarMix(3)
    params = {"scalars": jnp.asarray([0.3, -1.0, 0.5]), "gamma": jnp.asarray(1.7)}
    got = module.apply({"params": params}, layers)
    w = torch.softmax(torch.tensor([0.3, -1.0, 0.5]), 0)  # ScalarMix.forward, no layer norm
    want = 1.7 * sum(w[k] * torch.as_tensor(h) for k, h in enumerate(layers))
    np.testing.assert_allclose(got, want.numpy(), atol=2e-6)
    with pytest.raises(ValueError, match="ScalarMix of 3 layers got 2"):
        module.apply({"params": params}, layers[:2])


def test_bilm_directions_see_only_their_side():
    """The forward LM's logits at t depend on tokens <= t only; the backward's on >= t."""
    model = BiLM(num_chars=20, vocab_size=11, num_layers=2, hidden_dim=8, proj_dim=4,
                 char_dim=4, filters=((1, 4), (2, 4)), num_highway=1)  # fmt: skip
    chars = np.random.default_rng(4).integers(1, 20, size=(2, T, 3)).astype(np.int32)
    params = model.init(jax.random.PRNGKey(0), chars)["params"]
    layers, fwd, bwd = model.apply({"params": params}, chars)
    assert len(layers) == 3 and all(h.shape == (2, T, 8) for h in layers)
    changed = chars.copy()
    changed[:, 3] = (changed[:, 3] + 1) % 19 + 1
    _, fwd2, bwd2 = model.apply({"params": params}, changed)
    np.testing.assert_allclose(fwd[:, :3], fwd2[:, :3], atol=1e-6)
    np.testing.assert_allclose(bwd[:, 4:], bwd2[:, 4:], atol=1e-6)
    assert float(jnp.abs(fwd[:, 3:] - fwd2[:, 3:]).max()) > 1e-5
    assert float(jnp.abs(bwd[:, :4] - bwd2[:, :4]).max()) > 1e-5


def test_feature_classifier_freezes_the_bilm_and_learns_the_mix():
    from seqjax.models.elmo import ELMoFeatureClassifier

    bilm = BiLM(num_chars=20, vocab_size=11, num_layers=2, hidden_dim=8, proj_dim=4,
                char_dim=4, filters=((1, 4),), num_highway=1)  # fmt: skip
    model = ELMoFeatureClassifier(bilm, num_classes=3, hidden_dim=8)
    chars = np.random.default_rng(5).integers(1, 20, size=(2, T, 3)).astype(np.int32)
    lengths = jnp.asarray([T, 2])
    params = model.init(jax.random.PRNGKey(0), chars, lengths)["params"]

    def loss(p):
        return model.apply({"params": p}, chars, lengths).sum()

    grads = jax.grad(loss)(params)
    assert all(float(jnp.abs(g).max()) == 0 for g in jax.tree.leaves(grads["bilm"]))
    assert float(jnp.abs(grads["mix"]["scalars"]).max()) > 0
    assert float(jnp.abs(grads["mix"]["gamma"])) > 0
    # the padded tokens of row 1 do not count
    changed = chars.copy()
    changed[1, 2:] = 1
    np.testing.assert_allclose(
        model.apply({"params": params}, chars, lengths)[1],
        model.apply({"params": params}, changed, lengths)[1], atol=1e-6,
    )  # fmt: skip
