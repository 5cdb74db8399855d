"""XLNet's memory across training batches (``model.kind = "xlnet"``,
``seqjax.models.xlnet_memory``): two consecutive stream windows (stride ``reuse_len``)
through the ``plm`` task with the memory threaded as the train step threads it give the
query-stream logits and the memory of ``transformers``' ``XLNetLMHeadModel`` run with its
``mems`` (zeros first, as the reference's training starts), and the streams advance by
``reuse_len`` so the memory ends where the next window starts."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import dataclasses  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from seqjax import convert, tasks  # noqa: E402
from seqjax.data import pipeline  # noqa: E402
from seqjax.models import xlnet_memory  # noqa: E402
from tests.models.test_xlnet import B, T, V, _permutation  # noqa: E402

R, M = T // 2, 6  # reuse_len, mem_len


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    torch.manual_seed(1)
    cfg = transformers.XLNetConfig(vocab_size=V, d_model=16, n_layer=2, n_head=2, d_inner=24,
                                   dropout=0.0, mem_len=M, reuse_len=R)  # fmt: skip
    hf = transformers.XLNetLMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith(("bias", "seg_embed", "mask_emb")):
                p.normal_(0.0, 0.1)
    path = tmp_path_factory.mktemp("xlnet_mem")
    hf.save_pretrained(path)
    return hf, convert.load(path)


def _windows(steps=2):
    """Row r of step s: stream r's tokens ``[s R, s R + T)`` (``LMStreams`` with stride R)."""
    stream = np.random.default_rng(5).integers(1, V, 40 * B + 1)
    maker = pipeline.LMStreams(lambda: stream, T, True, B, 0, 1, stride=R)
    return [maker(s)["inputs"] for s in range(steps)]


def test_streams_advance_by_reuse_len():
    first, second = _windows()
    np.testing.assert_array_equal(second[:, :R], first[:, R:2 * R])  # fmt: skip
    assert pipeline.LMStreams.num_windows(40, T, R, True) == (40 - T) // R + 1


def test_two_batches_with_memory_equal_transformers_mems(pair):
    hf, imp = pair
    model = xlnet_memory.XLNetWithMemory(dataclasses.replace(imp.config, mem_len=M, reuse_len=R))
    task = tasks.get("plm")
    apply = jax.jit(lambda p, b, m: task.apply(model, p, b, rng=None, train=False, memory=m))
    memory, ref_mems = model.init_memory(B), [torch.zeros(M, B, 16) for _ in range(2)]
    for step, ids in enumerate(_windows()):
        ex = _permutation(30 + step)
        batch = {"inputs": jnp.asarray(ids), "perm_mask": jnp.asarray(ex["perm_mask"] > 0),
                 "target_mapping": jnp.asarray(ex["target_mapping"], jnp.float32)}  # fmt: skip
        logits, memory = apply(imp.params, batch, memory)  # as the train step threads it
        with torch.no_grad():
            f32 = torch.float32
            out = hf(torch.tensor(ids), mems=ref_mems, use_mems=True,
                     perm_mask=torch.tensor(ex["perm_mask"], dtype=f32),
                     target_mapping=torch.tensor(ex["target_mapping"], dtype=f32))  # fmt: skip
        ref_mems = out.mems
        np.testing.assert_allclose(np.asarray(logits), out.logits.numpy(), rtol=1e-4, atol=1e-4)
        for mine, ref in zip(memory, ref_mems):
            assert mine.shape == (B, M, 16)
            np.testing.assert_allclose(np.asarray(mine), ref.numpy().transpose(1, 0, 2),
                                       rtol=1e-4, atol=1e-5)  # fmt: skip


def test_memory_kind_config_errors_name_the_fields():
    import importlib.util

    from seqjax.train import config_validation
    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location("xlnet_cfg", REPO / "configs" / "xlnet.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    config_validation.validate(mod.get_config("memory,smoke"))  # the shipped variant is valid
    bad = mod.get_config("smoke")
    bad.model.kind = "xlnet"
    with pytest.raises(ValueError, match="lm_batching.*'stream' with model.kind='xlnet'"):
        config_validation.validate(bad)
