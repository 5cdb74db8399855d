"""The RNN encoder-decoder against references: ``GlobalAttention`` (dot, general, mlp) equals
a numpy port of OpenNMT-py's ``onmt.modules.GlobalAttention`` on a padded source; a
one-layer model (LSTM, Bahdanau and Luong-general with input feeding) equals a PyTorch
reimplementation with the same weights in teacher-forced loss and greedy tokens; the cached
step equals teacher forcing.

Legend: B batch, S source length, T target length, D / H width, V vocabulary.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.convert import torch_rnn
from seqjax.models.rnn_seq2seq import (
    GlobalAttention,
    RNNEncoderDecoder,
    RNNSeq2SeqConfig,
)

torch = pytest.importorskip("torch")
B, S, T, D, V = 3, 6, 5, 8, 24
LENGTHS = np.array([6, 3, 1])


def _onmt_global_attention(source, memory_bank, src_len, attn_type, w):
    """OpenNMT-py's GlobalAttention.forward (softmax, no coverage) in numpy; ``w`` holds
    torch-layout weights ``[out, in]``."""
    if attn_type in ("dot", "general"):
        h_t = source @ w["linear_in"].T if attn_type == "general" else source
        align = h_t @ memory_bank.transpose(0, 2, 1)
    else:
        wq = source @ w["linear_query"].T + w["linear_query_bias"]
        uh = memory_bank @ w["linear_context"].T
        align = (np.tanh(wq[:, :, None, :] + uh[:, None, :, :]) @ w["v"].T)[..., 0]
    mask = np.arange(memory_bank.shape[1])[None, :] < src_len[:, None]
    align = np.where(mask[:, None, :], align, -np.inf)
    align = np.exp(align - align.max(-1, keepdims=True))
    align = align / align.sum(-1, keepdims=True)
    c = align @ memory_bank
    attn_h = np.concatenate([c, source], -1) @ w["linear_out"].T
    if attn_type == "mlp":
        attn_h = attn_h + w["linear_out_bias"]
    else:
        attn_h = np.tanh(attn_h)
    return attn_h, align


@pytest.mark.parametrize("score", ["dot", "general", "mlp"])
def test_global_attention_equals_opennmt_port(score):
    rng = np.random.default_rng(0)
    q_BTD = rng.normal(size=(B, T, D)).astype(np.float32)
    h_BSD = rng.normal(size=(B, S, D)).astype(np.float32)
    valid_BS = np.arange(S)[None] < LENGTHS[:, None]
    module = GlobalAttention(D, score)
    params = module.init(jax.random.PRNGKey(1), q_BTD, h_BSD, valid_BS)["params"]
    got_h, got_a = module.apply({"params": params}, q_BTD, h_BSD, valid_BS)
    w = {k: np.asarray(v["kernel"]).T for k, v in params.items()}
    w.update({f"{k}_bias": np.asarray(v["bias"]) for k, v in params.items() if "bias" in v})
    want_h, want_a = _onmt_global_attention(q_BTD, h_BSD, LENGTHS, score, w)
    np.testing.assert_allclose(got_a, want_a, atol=1e-6)
    np.testing.assert_allclose(got_h, want_h, atol=2e-6)
    assert (
        float(np.abs(np.asarray(got_a)[~np.broadcast_to(valid_BS[:, None], got_a.shape)]).max())
        == 0
    )


def _linear(module: torch.nn.Linear) -> dict:
    out = {"kernel": module.weight.detach().numpy().T}
    if module.bias is not None:
        out["bias"] = module.bias.detach().numpy()
    return out


class _TorchModel:
    """The one-layer model of ``seqjax.models.rnn_seq2seq`` written with torch ops."""

    def __init__(self, attention: str):
        torch.manual_seed(0)
        nn = torch.nn
        self.attention = attention
        self.embed = nn.Embedding(V, D)
        self.enc = nn.LSTM(D, D // 2, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(D, D)
        x_in = 2 * D if attention in ("bahdanau", "general") else D
        self.cell = nn.LSTM(x_in, D, batch_first=True)  # stepped one token at a time
        if attention == "bahdanau":
            self.lq, self.lc, self.v = (
                nn.Linear(D, D),
                nn.Linear(D, D, bias=False),
                nn.Linear(D, 1, bias=False),
            )
            self.readout = nn.Linear(3 * D, D)
        elif attention == "general":
            self.lin, self.lout = nn.Linear(D, D, bias=False), nn.Linear(2 * D, D, bias=False)
        self.head = nn.Linear(D, V)

    def flax_params(self) -> dict:
        step = {"cell_l0": torch_rnn.cell_from_torch(self.cell.state_dict(), "lstm", "_l0")}
        if self.attention == "bahdanau":
            lq, lc = _linear(self.lq), _linear(self.lc)
            step["attention"] = {"linear_query": lq, "linear_context": lc, "v": _linear(self.v)}
            step["readout"] = _linear(self.readout)
        elif self.attention == "general":
            step["attention"] = {"linear_in": _linear(self.lin), "linear_out": _linear(self.lout)}
        return {
            "source_embed": {"embedding": self.embed.weight.detach().numpy()},
            "encoder": torch_rnn.stack_from_torch(self.enc.state_dict(), "lstm", 1, True),
            "bridge_l0": _linear(self.bridge),
            "decoder": {"step": step},
            "head": _linear(self.head),
        }

    def _attend(self, q, h_s, valid):
        if self.attention == "bahdanau":
            scores = self.v(torch.tanh(self.lq(q)[:, None] + self.lc(h_s)))[..., 0]
        else:
            scores = torch.einsum("bd,bsd->bs", self.lin(q), h_s)
        a = torch.softmax(scores.masked_fill(~valid, -float("inf")), -1)
        return torch.einsum("bs,bsd->bd", a, h_s)

    @torch.no_grad()
    def run(self, src, dec_in=None, steps=T, eos=3):
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

        src = torch.as_tensor(src)
        lengths = (src != 0).sum(-1)
        packed = pack_padded_sequence(
            self.embed(src), lengths, batch_first=True, enforce_sorted=False
        )
        out, (h_n, _) = self.enc(packed)
        h_s = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])[0]
        valid = torch.arange(src.shape[1])[None] < lengths[:, None]
        h = torch.tanh(self.bridge(torch.cat([h_n[0], h_n[1]], -1)))
        state, feed = (h[None], torch.zeros_like(h)[None]), torch.zeros_like(h)
        tok = torch.zeros(src.shape[0], dtype=torch.long)
        logits, tokens = [], []
        for t in range(steps):
            y = self.embed(torch.as_tensor(dec_in[:, t]) if dec_in is not None else tok)
            if self.attention == "bahdanau":
                ctx = self._attend(state[0][0], h_s, valid)
                x = torch.cat([y, ctx], -1)
            else:
                x = torch.cat([y, feed], -1)
            o, state = self.cell(x[:, None], state)
            h = o[:, 0]
            if self.attention == "bahdanau":
                out = torch.tanh(self.readout(torch.cat([h, ctx, y], -1)))
            else:
                c = self._attend(h, h_s, valid)
                out = feed = torch.tanh(self.lout(torch.cat([c, h], -1)))
            logits.append(self.head(out))
            tok = logits[-1].argmax(-1)
            tokens.append(tok)
        return torch.stack(logits, 1).numpy(), torch.stack(tokens, 1).numpy()


def _batch():
    rng = np.random.default_rng(2)
    src = rng.integers(4, V, size=(B, S)).astype(np.int32)
    src[np.arange(S)[None] >= LENGTHS[:, None]] = 0
    tgt = rng.integers(4, V, size=(B, T)).astype(np.int32)
    dec_in = np.concatenate([np.zeros((B, 1), np.int32), tgt[:, :-1]], 1)
    return src, tgt, dec_in


@pytest.mark.parametrize("attention", ["bahdanau", "general"])
def test_one_layer_model_equals_torch_loss_and_greedy_tokens(attention):
    from seqjax.tasks import losses, seq2seq_decode

    ref = _TorchModel(attention)
    cfg = RNNSeq2SeqConfig(vocab_size=V, hidden_dim=D, embed_dim=D, attention_type=attention,
                           share_embeddings=True, max_len=S)  # fmt: skip
    params = jax.tree.map(jnp.asarray, ref.flax_params())
    model = RNNEncoderDecoder(cfg)
    src, tgt, dec_in = _batch()
    abstract = jax.eval_shape(model.init, jax.random.PRNGKey(0), src, dec_in)["params"]
    assert jax.tree.structure(abstract) == jax.tree.structure(params)
    logits = model.apply({"params": params}, src, dec_in)
    want_logits, _ = ref.run(src, dec_in)
    np.testing.assert_allclose(logits, want_logits, atol=2e-5)
    w = np.ones((B, T), np.float32)
    sums = losses.cross_entropy_sums(logits, tgt, w)
    want = torch.nn.functional.cross_entropy(torch.as_tensor(want_logits).reshape(-1, V),
                                             torch.as_tensor(tgt).reshape(-1).long())  # fmt: skip
    np.testing.assert_allclose(float(sums["loss_sum"]) / B / T, float(want), rtol=1e-5)
    # Greedy (beam 1) through the task's beam search, without EOS (id 3 never wins here
    # only by chance: compare up to the first EOS of either).
    fn = seq2seq_decode.make_translate_fn(cfg, beam_size=1, alpha=0.0, max_len=T, eos_id=3)
    got_tokens, _ = fn(params, jnp.asarray(src))
    _, want_tokens = ref.run(src)
    for g, r in zip(np.asarray(got_tokens), want_tokens):
        n = next((i + 1 for i, x in enumerate(r) if x == 3), T)
        assert list(g[:n]) == list(r[:n])


@pytest.mark.parametrize("attention", ["none", "bahdanau", "general"])  # dot: as general
def test_cached_steps_equal_teacher_forcing(attention):
    cfg = RNNSeq2SeqConfig(vocab_size=V, hidden_dim=D, num_layers=2, attention_type=attention,
                           cell="gru", max_len=S)  # fmt: skip
    model = RNNEncoderDecoder(cfg)
    src, _, dec_in = _batch()
    params = model.init(jax.random.PRNGKey(0), src, dec_in)["params"]
    full = model.apply({"params": params}, src, dec_in)
    encoded = model.apply({"params": params}, src, method="encode")
    cache, got = model.init_cache(B, S), []
    step = jax.jit(model.step)  # one program for every step
    for t in range(T):
        logits, cache = step(params, cache, encoded, src, dec_in[:, t : t + 1])
        got.append(logits)
    np.testing.assert_allclose(jnp.stack(got, 1), full, atol=1e-5)


# ---- "additive" as a mechanism of the attention interface --------------------------------


def test_additive_mechanism_equals_opennmt_mlp_scores_per_head():
    """With the projections folded into q and k (OpenNMT's ``linear_query``/``linear_context``
    the identity, no bias), each head's weights and context equal OpenNMT's mlp attention."""
    from seqjax.attention import get

    rng = np.random.default_rng(3)
    heads = 2
    q = rng.normal(size=(B, T, heads, D)).astype(np.float32)
    k = rng.normal(size=(B, S, heads, D)).astype(np.float32)
    v_hd = rng.normal(size=(heads, D)).astype(np.float32)
    valid_BS = np.arange(S)[None] < LENGTHS[:, None]
    out = get("additive")(q, k, k, mask=valid_BS, additive_v=v_hd)
    eye = np.eye(D, dtype=np.float32)
    for h in range(heads):
        w = {"linear_query": eye, "linear_query_bias": np.zeros(D, np.float32),
             "linear_context": eye, "v": v_hd[h][None], "linear_out": np.zeros((D, 2 * D)),
             "linear_out_bias": np.zeros(D)}  # fmt: skip
        _, align = _onmt_global_attention(q[:, :, h], k[:, :, h], LENGTHS, "mlp", w)
        np.testing.assert_allclose(out[:, :, h], align @ k[:, :, h], atol=2e-6)


def test_transformer_lm_runs_with_additive_attention_causally():
    import flax.linen as nn

    from seqjax.models import TransformerConfig, TransformerLM

    cfg = TransformerConfig(vocab_size=V, num_layers=2, num_heads=2, d_model=16, d_ff=32,
                            max_len=8, attention=(("additive", ()),))  # fmt: skip
    model = TransformerLM(cfg)
    x = jax.random.randint(jax.random.PRNGKey(0), (2, 8), 0, V)
    params = nn.unbox(model.init(jax.random.PRNGKey(1), x)["params"])
    assert params["encoder"]["block_0"]["attn"]["additive_v"].shape == (2, 8)
    logits = model.apply({"params": params}, x)
    changed = model.apply({"params": params}, x.at[:, 5:].set((x[:, 5:] + 1) % V))
    np.testing.assert_allclose(logits[:, :5], changed[:, :5], atol=1e-6)  # causal
    assert float(jnp.abs(logits[:, 5:] - changed[:, 5:]).max()) > 1e-4
