"""XLNet equals ``transformers``' ``XLNetLMHeadModel`` (random init, saved with
``save_pretrained`` and imported with ``seqjax.convert``): the content stream (oracle 1 of
issue 45), the two-stream query logits under a permutation (oracle 2) and memory across
three segments (oracle 3)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jax.numpy as jnp  # noqa: E402

from seqjax import convert  # noqa: E402

B, T, V = 2, 8, 99
TOL = dict(rtol=1e-4, atol=1e-4)


def _hf_config(**kw):
    return transformers.XLNetConfig(
        vocab_size=V, d_model=32, n_layer=2, n_head=4, d_inner=37, dropout=0.0,
        mem_len=None, reuse_len=None, **kw,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    torch.manual_seed(0)
    hf = transformers.XLNetLMHeadModel(_hf_config()).eval()
    with torch.no_grad():  # non-zero biases, so that every term is checked
        for name, p in hf.named_parameters():
            if name.endswith(("bias", "seg_embed", "mask_emb")):
                p.normal_(0.0, 0.1)
    path = tmp_path_factory.mktemp("xlnet")
    hf.save_pretrained(path)
    return hf, convert.load(path), path


def _ids(seed, shape=(B, T)):
    return np.random.default_rng(seed).integers(0, V, shape)


def _types():
    return np.array([[0] * 5 + [1] * 3, [0] * 3 + [1] * 5])


def _t(x, dtype=torch.long):
    return torch.tensor(np.asarray(x), dtype=dtype)


def test_import_names_the_architecture(pair):
    _, imp, _ = pair
    assert imp.arch == "xlnet" and imp.initialized == [] and imp.unused == []


@pytest.mark.parametrize("implementation", ["reference", "blockwise"])
def test_content_stream_equals_transformers(pair, implementation):
    """Oracle 1: no permutation, segments A/B: every layer's hidden states and the logits."""
    hf, imp, _ = pair
    import dataclasses

    model = convert.make_model(
        "xlnet", dataclasses.replace(imp.config, implementation=implementation)
    )
    ids, types = _ids(1), _types()
    with torch.no_grad():
        out = hf(_t(ids), token_type_ids=_t(types), output_hidden_states=True, use_mems=False)
    logits, (_, hiddens) = model.apply(
        {"params": imp.params}, jnp.asarray(ids), token_types_BT=jnp.asarray(types),
        return_state=True,
    )  # fmt: skip
    assert len(hiddens) == len(out.hidden_states) == 3
    for mine, ref in zip(hiddens, out.hidden_states):
        np.testing.assert_allclose(np.asarray(mine), ref.numpy(), **TOL)
    np.testing.assert_allclose(np.asarray(logits), out.logits.numpy(), **TOL)


def _permutation(seed, t=T, reuse_len=4, num_predict=3):
    """perm_mask / target_mapping from the port of zihangdai/xlnet's ``_local_perm``."""
    from tests.data import _xlnet_reference as ref

    rng = np.random.default_rng(seed)
    out = []
    for row in _ids(seed + 100, (B, t)):
        masks = [
            ref.ref_sample_mask(rng, row[h], mask_alpha=6, mask_beta=1, goal_num_predict=g)
            for h, g in ((slice(0, reuse_len), num_predict - num_predict // 2),
                         (slice(reuse_len, t), num_predict // 2))
        ]  # fmt: skip
        out.append(
            ref.ref_parse(rng, row, row, np.concatenate(masks), seq_len=t, reuse_len=reuse_len,
                          perm_size=reuse_len, num_predict=num_predict)
        )  # fmt: skip
    return {k: np.stack([o[k] for o in out]) for k in out[0]}


@pytest.mark.parametrize("implementation", ["reference", "blockwise"])
def test_query_stream_equals_transformers(pair, implementation):
    """Oracle 2: a perm_mask and target_mapping from the port of ``_local_perm``: the
    query-stream logits ``[B, P, V]`` equal ``XLNetLMHeadModel``'s."""
    hf, imp, _ = pair
    import dataclasses

    model = convert.make_model(
        "xlnet", dataclasses.replace(imp.config, implementation=implementation)
    )
    ex = _permutation(7)
    ids, types = ex["input_k"], _types()
    with torch.no_grad():
        perm, tmap = _t(ex["perm_mask"], torch.float32), _t(ex["target_mapping"], torch.float32)
        out = hf(_t(ids), token_type_ids=_t(types), perm_mask=perm, target_mapping=tmap)
        ref = out.logits
    mine = model.apply(
        {"params": imp.params}, jnp.asarray(ids), token_types_BT=jnp.asarray(types),
        perm_mask_BTT=jnp.asarray(ex["perm_mask"] > 0),
        target_mapping_BPT=jnp.asarray(ex["target_mapping"]),
    )  # fmt: skip
    assert mine.shape == (B, 3, V)
    np.testing.assert_allclose(np.asarray(mine), ref.numpy(), **TOL)


@pytest.mark.parametrize("mem_len", [4, 8, 12])
def test_memory_across_segments_equals_transformers(pair, mem_len):
    """Oracle 3: three segments, ``reuse_len = T/2``, ``mem_len`` <, = and > T: every
    layer's cached tensors and each segment's logits (content stream, then the query stream
    of a permutation on the last segment) equal ``transformers``' ``mems``."""
    hf, imp, _ = pair
    import dataclasses

    model = convert.make_model(
        "xlnet", dataclasses.replace(imp.config, mem_len=mem_len, reuse_len=T // 2)
    )
    hf.transformer.mem_len, hf.transformer.reuse_len = mem_len, T // 2
    try:
        ref_mems, mine_mems = None, None
        ex = _permutation(11)
        for seg in range(3):
            ids, types = _ids(20 + seg), _types()
            kw_hf, kw = {}, {}
            if seg == 2:
                kw_hf = dict(perm_mask=_t(ex["perm_mask"], torch.float32),
                             target_mapping=_t(ex["target_mapping"], torch.float32))  # fmt: skip
                kw = dict(perm_mask_BTT=jnp.asarray(ex["perm_mask"] > 0),
                          target_mapping_BPT=jnp.asarray(ex["target_mapping"]))  # fmt: skip
            with torch.no_grad():
                out = hf(_t(ids), token_type_ids=_t(types), mems=ref_mems, use_mems=True, **kw_hf)
            logits, (mine_mems, _) = model.apply(
                {"params": imp.params}, jnp.asarray(ids), token_types_BT=jnp.asarray(types),
                mems=mine_mems, return_state=True, **kw,
            )  # fmt: skip
            ref_mems = out.mems
            np.testing.assert_allclose(np.asarray(logits), out.logits.numpy(), **TOL)
            assert len(mine_mems) == len(ref_mems) == 2
            for mine, ref in zip(mine_mems, ref_mems):
                ref_BME = ref.numpy().transpose(1, 0, 2)
                assert mine.shape == ref_BME.shape == (B, min(mem_len, (seg + 1) * T // 2), 32)
                np.testing.assert_allclose(np.asarray(mine), ref_BME, **TOL)
    finally:
        hf.transformer.mem_len, hf.transformer.reuse_len = None, None


def test_export_round_trip_loads_in_transformers(pair, tmp_path):
    """``convert.save`` writes a folder ``XLNetLMHeadModel.from_pretrained`` loads with the
    same logits (and ``convert.load`` reads back the same parameters)."""
    hf, imp, _ = pair
    convert.save(tmp_path, "xlnet", imp.config, imp.params)
    back = transformers.XLNetLMHeadModel.from_pretrained(tmp_path).eval()
    ids, types = _ids(3), _types()
    with torch.no_grad():
        want = hf(_t(ids), token_type_ids=_t(types)).logits.numpy()
        got = back(_t(ids), token_type_ids=_t(types)).logits.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    again = convert.load(tmp_path)
    import jax

    for a, b in zip(jax.tree.leaves(again.params), jax.tree.leaves(imp.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_bad_config_json_is_one_sentence():
    from seqjax.convert.archs import xlnet as arch

    hf = _hf_config().to_dict()
    with pytest.raises(ValueError, match="attn_type"):
        arch.xlnet_config({**hf, "attn_type": "uni"})
    with pytest.raises(ValueError, match="bi_data"):
        arch.xlnet_config({**hf, "bi_data": True})
