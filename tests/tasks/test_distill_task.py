"""The distillation task (``seqjax.tasks.distill``): one train step's loss is
``distillation_loss`` (HF ``distiller.py``'s formula, tested in test_distillation.py) of the
teacher's and the student's outputs computed directly; the frozen teacher is unchanged by a
step while the student moves; the student starts from the teacher's alternate layers; a
bad ``config.distill`` field is one sentence."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from seqjax import tasks
from seqjax.models import TransformerConfig
from seqjax.models.distill_pair import MaskedLM, student_config
from seqjax.tasks import distill, distillation
from seqjax.train import defaults, optim, sharding
from seqjax.train import step as step_lib

V, T, B = 23, 12, 3


def _cfg():
    return TransformerConfig(vocab_size=V, num_layers=4, num_heads=2, d_model=16, d_ff=32,
                             max_len=16, positional="learned", causal=False, pad_id=0,
                             mlm_head_transform=True, type_vocab_size=2, norm_position="post",
                             embed_norm=True)  # fmt: skip


def _batch():
    rng = np.random.default_rng(0)
    inputs = rng.integers(1, V, (B, T)).astype(np.int32)
    inputs[0, -3:] = 0  # padding
    targets = rng.integers(1, V, (B, T)).astype(np.int32)
    weights = (rng.random((B, T)) < 0.3).astype(np.float32)
    weights[:, 1] = 1.0
    weights[0, -3:] = 0.0
    return {"inputs": jnp.asarray(inputs), "targets": jnp.asarray(targets),
            "weights": jnp.asarray(weights)}  # fmt: skip


def _task(**fields):
    config = ml_collections.ConfigDict({"distill": {**distill.FIELDS, **fields}})
    return tasks.get("distill").configure(config)


def _params(model, seed):
    init = jax.jit(lambda key: model.init(key, jnp.ones((1, T), jnp.int32))["params"])
    return nn.unbox(init(jax.random.PRNGKey(seed)))


def _assert_student_is_alternate_teacher_layers(p):
    """The student starts from the teacher (Sanh et al. 2019 §3): blocks 0, 2 -> 0, 1, the
    segment row folded into the positions, the same masked-LM head."""
    t, s = p["teacher"]["encoder"], p["student"]["encoder"]
    for j, i in enumerate((0, 2)):
        same = jax.tree.map(np.array_equal, s[f"block_{j}"], t[f"block_{i}"])
        assert all(jax.tree.leaves(same))
    assert "type_embed" not in s and "block_2" not in s
    np.testing.assert_allclose(s["pos_embed"], t["pos_embed"] + t["type_embed"][0][None])
    assert all(jax.tree.leaves(jax.tree.map(np.array_equal, p["student"]["mlm_head"],
                                            p["teacher"]["mlm_head"])))  # fmt: skip


def test_step_loss_is_distillation_loss_and_teacher_is_unchanged(temperature=2.0):
    cfg = _cfg()
    task = _task(temperature=temperature)
    model = task.make_model(cfg)
    o = defaults.optimizer()
    o.update({"freeze": ("teacher",), "schedule": "constant", "warmup_steps": 0,
              "learning_rate": 0.05})  # fmt: skip
    tx, schedule = optim.make_optimizer(o, 10)
    params = _params(model, 1)
    _assert_student_is_alternate_teacher_layers(params)
    state = {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32),
             "rng": jax.random.PRNGKey(2)}  # fmt: skip
    mesh = sharding.make_mesh({"data": 1, "fsdp": 1, "tensor": 1})
    train_step = jax.jit(step_lib.make_train_step(model, task, tx, schedule, accum_steps=1,
                                                  mesh=mesh))  # fmt: skip
    batch = _batch()
    new_state, metrics = train_step(state, batch)

    # The reference: each half applied on its own, then the loss function directly.
    mask = batch["inputs"] != 0

    def half(c, p):
        return jax.jit(MaskedLM(c).apply)({"params": p}, batch["inputs"], mask_BT=mask)

    t_logits, t_hidden = half(cfg, params["teacher"])
    s_logits, s_hidden = half(student_config(cfg, (0, 2)), params["student"])
    want, parts = distillation.distillation_loss(
        s_logits, t_logits, labels_BT=batch["targets"], label_weights_BT=batch["weights"],
        attention_mask_BT=mask, s_hidden_BTE=s_hidden, t_hidden_BTE=t_hidden,
        temperature=temperature, alpha_ce=5.0, alpha_mlm=2.0, alpha_cos=1.0,
    )  # fmt: skip
    np.testing.assert_allclose(metrics["loss"], want, rtol=1e-5)
    np.testing.assert_allclose(metrics["kl"], parts["ce"], rtol=1e-5)
    np.testing.assert_allclose(metrics["cos"], parts["cos"], rtol=1e-5, atol=1e-7)
    assert float(parts["ce"]) > 0 and float(parts["cos"]) > 0  # the halves differ

    same_t = jax.tree.map(np.array_equal, new_state["params"]["teacher"], params["teacher"])
    assert all(jax.tree.leaves(same_t))
    moved = jax.tree.map(np.array_equal, new_state["params"]["student"], params["student"])
    assert not all(jax.tree.leaves(moved))


def test_bad_distill_fields_and_unfrozen_teacher_are_reported():
    config = ml_collections.ConfigDict({
        "distill": {**distill.FIELDS, "temperature": 0.0, "student_layers": (0, 7)},
        "model": {"num_layers": 4, "attention": "dense"},
        "optimizer": {"freeze": ()},
        "data": {"name": "imdb_bytes"},
    })  # fmt: skip
    found = {}
    tasks.get("distill").validate(config, lambda f, v, valid: found.setdefault(f, valid))
    assert set(found) >= {"distill.temperature", "distill.student_layers", "optimizer.freeze"}
    assert "'teacher'" in found["optimizer.freeze"]


def _run_of(cfg, mesh):
    """The pieces of a built run that ``init_from.start`` reads."""
    import types

    from jax.sharding import NamedSharding, PartitionSpec

    task = _task()
    model = task.make_model(cfg)
    params = _params(model, 3)
    replicated = NamedSharding(mesh, PartitionSpec())
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated), params
    )
    return types.SimpleNamespace(task=task, model=model, abstract={"params": abstract},
                                 init=lambda: {"params": params}, mesh=mesh,
                                 config=ml_collections.ConfigDict({}))  # fmt: skip


@pytest.mark.slow  # about 10 s of CPU: torch, a 4-layer BERT, two loads
def test_init_from_loads_the_whole_teacher_then_copies_the_student(tmp_path):
    """``init_from=hf:<folder>`` (a ``BertForMaskedLM``) and a seqjax checkpoint of the same
    weights both fill ``teacher/`` whole (masked-LM head too); the student is then taken from
    the loaded teacher; the teacher's logits equal Hugging Face's."""
    import orbax.checkpoint as ocp
    from flax import traverse_util

    from seqjax import convert
    from seqjax.train import hf_start, init_from
    from tests.convert import _hf_models as hf

    theirs = hf._seeded(lambda: hf.transformers.BertForMaskedLM(hf.transformers.BertConfig(
        vocab_size=hf.V, hidden_size=hf.E, num_hidden_layers=4, num_attention_heads=hf.HEADS,
        intermediate_size=hf.FF, max_position_embeddings=hf.POSITIONS)))  # fmt: skip
    folder = hf.save(theirs, tmp_path / "hf")
    _, cfg = hf_start.imported_config("hf:" + folder)
    mesh = sharding.make_mesh({"data": 1, "fsdp": 1, "tensor": 1})
    loaded = convert.load(folder).params
    state_dir = tmp_path / "run" / "checkpoints" / "1" / "state"
    ocp.PyTreeCheckpointer().save(state_dir, {"params": loaded})
    for value in ("hf:" + folder, str(state_dir.parent)):
        run = _run_of(cfg, mesh)
        params = init_from.start(run, value)["params"]
        got = traverse_util.flatten_dict(params["teacher"])
        for path, x in traverse_util.flatten_dict(loaded).items():
            np.testing.assert_array_equal(got[path], x, err_msg=f"{value}: {path}")
        s, t = params["student"]["encoder"], params["teacher"]["encoder"]
        assert all(jax.tree.leaves(jax.tree.map(np.array_equal, s["block_1"], t["block_2"])))
    ids = hf.ids((2, T))
    ours, _ = jax.jit(MaskedLM(cfg).apply)({"params": params["teacher"]}, jnp.asarray(ids))
    hf.assert_close(ours, hf.logits(theirs, ids))


@pytest.mark.slow  # a subprocess run: about a minute
def test_distil_a_hugging_face_teacher_from_the_command_line(tmp_path):
    """``configs/distilbert.py`` with ``init_from=hf:<BertForMaskedLM folder>``: the data use
    the tokenizer's own [MASK] (no row appended), so the teacher's table loads as it is and
    one step runs."""
    import json

    from tests.convert import _hf_models as hf
    from tests.convert.test_hf_start import _first_batch, _folder, _main

    bert = hf._seeded(lambda: hf.transformers.BertForMaskedLM(hf.transformers.BertConfig(
        vocab_size=hf.V, hidden_size=hf.E, num_hidden_layers=4, num_attention_heads=hf.HEADS,
        intermediate_size=hf.FF, max_position_embeddings=hf.POSITIONS)))  # fmt: skip
    folder = _folder(tmp_path, bert)
    out = _main(tmp_path, f"--config.init_from=hf:{folder}", config="configs/distilbert.py:smoke")
    assert out.returncode == 0, out.stderr[-3000:]
    record = json.loads((tmp_path / "work" / "init_from.json").read_text())
    assert record["new"] == [] and any(p.startswith("mlm_head/") for p in record["loaded"])
    batch = _first_batch(tmp_path / "work")
    mask_id = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]["[MASK]"]
    assert (batch["inputs"] == mask_id).any() and batch["inputs"].max() < hf.V
