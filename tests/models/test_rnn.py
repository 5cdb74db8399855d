"""The recurrent family against PyTorch: ``torch.nn.LSTM`` / ``GRU`` / ``RNN(tanh)`` with
their weights copied onto Flax's cells (``seqjax.convert.torch_rnn``), uni- and
bidirectional, two layers, padded rows; and the LM's carried state (segments = one pass, no
gradient into the state, sampling with the state = greedy recomputation).

Legend: B batch, T time, I input width, H hidden width, V vocabulary.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.convert import torch_rnn
from seqjax.models.rnn import CELLS, RNNLM, RecurrentStack, RNNConfig, last_hidden, make_cell
from seqjax.tasks import sampling

torch = pytest.importorskip("torch")
B, T, I, H = 3, 7, 6, 8


def _torch_rnn(cell, **kwargs):
    if cell == "lstm":
        return torch.nn.LSTM(I, H, batch_first=True, **kwargs)
    if cell == "gru":
        return torch.nn.GRU(I, H, batch_first=True, **kwargs)
    return torch.nn.RNN(I, H, nonlinearity="tanh", batch_first=True, **kwargs)


@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
@pytest.mark.parametrize("cell", CELLS)
def test_stack_equals_torch_with_padding(cell, bidirectional):
    """Every valid step's output and every layer's final (h, c) equal PyTorch's on packed
    (padded) rows of lengths 7, 4 and 1."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    torch.manual_seed(0)
    layers = 2
    ref = _torch_rnn(cell, num_layers=layers, bidirectional=bidirectional)
    x_BTI = torch.randn(B, T, I)
    lengths_B = torch.tensor([7, 4, 1])
    with torch.no_grad():
        packed = pack_padded_sequence(x_BTI, lengths_B, batch_first=True, enforce_sorted=False)
        out, finals = ref(packed)
        want_BTH = pad_packed_sequence(out, batch_first=True, total_length=T)[0].numpy()
    h_n, c_n = finals if cell == "lstm" else (finals, None)
    params = torch_rnn.stack_from_torch(ref.state_dict(), cell, layers, bidirectional)
    stack = RecurrentStack(cell, H, layers, bidirectional=bidirectional)
    got_BTH, carries = stack.apply(
        {"params": params}, jnp.asarray(x_BTI.numpy()), None, jnp.asarray(lengths_B.numpy())
    )
    valid_BT = np.arange(T)[None] < lengths_B.numpy()[:, None]
    np.testing.assert_allclose(np.asarray(got_BTH)[valid_BT], want_BTH[valid_BT], atol=2e-6)
    dirs = 2 if bidirectional else 1
    for k in range(layers):
        for d, carry in enumerate(carries[k] if bidirectional else (carries[k],)):
            np.testing.assert_allclose(last_hidden(cell, carry), h_n[k * dirs + d], atol=2e-6)
            if cell == "lstm":
                np.testing.assert_allclose(carry[0], c_n[k * dirs + d], atol=2e-6)


@pytest.mark.parametrize("cell", CELLS)
def test_cell_states_per_step_equal_torch(cell):
    """Step by step, h_t (and the LSTM's c_t) of Flax's cell equal PyTorch's layer fed one
    step at a time from its own previous state."""
    torch.manual_seed(1)
    ref = _torch_rnn(cell)
    params = torch_rnn.cell_from_torch(ref.state_dict(), cell, "_l0")
    flax_cell = make_cell(cell, H)
    x_BTI = torch.randn(B, T, I)
    state, carry = None, (jnp.zeros((B, H)),) * 2 if cell == "lstm" else jnp.zeros((B, H))
    for t in range(T):
        with torch.no_grad():
            _, state = ref(x_BTI[:, t : t + 1], state)
        carry, _ = flax_cell.apply({"params": params}, carry, jnp.asarray(x_BTI[:, t].numpy()))
        h_ref, c_ref = state if cell == "lstm" else (state, None)
        np.testing.assert_allclose(last_hidden(cell, carry), h_ref[0].numpy(), atol=2e-6)
        if cell == "lstm":
            np.testing.assert_allclose(carry[0], c_ref[0].numpy(), atol=2e-6)


def test_converter_names_what_it_cannot_map():
    lstm = torch.nn.LSTM(I, H, proj_size=4)
    with pytest.raises(ValueError, match="proj_size"):
        torch_rnn.cell_from_torch(lstm.state_dict(), "lstm", "_l0")
    with pytest.raises(ValueError, match="cell='rnn' is not one of lstm, gru, elman"):
        torch_rnn.cell_from_torch(lstm.state_dict(), "rnn", "_l0")


def _lm(cell="lstm"):
    cfg = RNNConfig(vocab_size=20, cell=cell, num_layers=2, hidden_dim=16, embed_dim=8,
                    tie_embeddings=True)  # fmt: skip
    model = RNNLM(cfg)
    tokens_BT = jax.random.randint(jax.random.PRNGKey(0), (2, 12), 0, 20)
    params = model.init(jax.random.PRNGKey(1), tokens_BT)["params"]
    return model, params, tokens_BT


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_segments_with_carried_state_equal_one_pass(cell):
    model, params, tokens_BT = _lm(cell)
    full = model.apply({"params": params}, tokens_BT)
    memory = model.init_memory(2)
    parts = []
    segment = jax.jit(lambda x, mem: model.apply({"params": params}, x, mem))
    for s in range(0, 12, 4):  # three segments of 4
        logits, memory = segment(tokens_BT[:, s : s + 4], memory)
        parts.append(logits)
    np.testing.assert_allclose(jnp.concatenate(parts, 1), full, atol=1e-5)


def test_no_gradient_flows_into_the_carried_state():
    model, params, tokens_BT = _lm()
    memory = jax.tree.map(lambda z: z + 0.5, model.init_memory(2))

    def loss(mem):
        logits, new = model.apply({"params": params}, tokens_BT, mem)
        return logits.sum() + sum(jnp.sum(m) for m in jax.tree.leaves(new))

    grads = jax.grad(loss)(memory)
    assert all(float(jnp.abs(g).max()) == 0.0 for g in jax.tree.leaves(grads))
    logits0, _ = model.apply({"params": params}, tokens_BT, model.init_memory(2))
    logits1, _ = model.apply({"params": params}, tokens_BT, memory)
    assert float(jnp.abs(logits0 - logits1).max()) > 1e-4  # the state is used


def test_sampling_with_the_state_equals_greedy_recomputation():
    model, params, tokens_BT = _lm()
    prompt = np.asarray(tokens_BT[0, :6])
    got = sampling.generate_recurrent(model, params, prompt, 5, segment_len=4, temperature=0)
    # Greedy: each sampled token is the argmax of the full forward over everything before it.
    seq_1N = jnp.asarray([list(prompt) + list(got)])
    logits_1NV = model.apply({"params": params}, seq_1N)
    assert list(got) == [int(i) for i in jnp.argmax(logits_1NV[0, 5:10], -1)]
