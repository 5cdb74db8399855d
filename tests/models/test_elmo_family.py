"""The ``elmo`` family: the biLM loss of ``ELMoLM`` + task ``bilm`` against
``torch.nn.LSTM(proj_size=P)`` stacks with copied weights (forward, and backward on each
row's reversed real tokens) and a torch softmax; causality in both directions; the frozen
biLM unchanged by a transfer step of the job's optimizer (the family's ``frozen``).

Legend: B batch, T tokens, L characters per token, H cells, P projection, V vocabulary.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from seqjax import tasks
from seqjax.convert import torch_rnn
from seqjax.models import registry
from seqjax.models.elmo_family import ELMoClassifier, ELMoConfig, ELMoLM
from seqjax.train import defaults, optim

torch = pytest.importorskip("torch")
B, T, L, H, P, V = 2, 7, 6, 8, 4, 19
CFG = ELMoConfig(vocab_size=V, pad_id=0, token_chars=L, char_dim=4, filters=((1, 4), (2, 4)),
                 num_highway=1, num_layers=2, hidden_dim=H, proj_dim=P)  # fmt: skip
LENGTHS = np.array([7, 4])


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    inputs = rng.integers(1, V, (B, T)).astype(np.int32)
    inputs[1, LENGTHS[1] :] = 0  # a padded row
    chars = rng.integers(1, 262, (B, T, L)).astype(np.int32) * (inputs[..., None] > 0)
    weights = (np.arange(T)[None] < LENGTHS[:, None] - 1).astype(np.float32)  # LM weights
    weights[:, -1] = 0  # seqjax.data.bilm
    targets = np.concatenate([inputs[:, 1:], np.zeros((B, 1), np.int32)], 1)
    return {"inputs": inputs, "targets": targets, "weights": weights, "token_chars": chars}


def _torch_stack(x_BTP, lstms):
    h = x_BTP
    for k, lstm in enumerate(lstms):
        out = lstm(h)[0]
        h = out + h if k > 0 else out  # the residual from the second layer on
    return h


def _reverse_rows(x, lengths):
    out = x.clone()
    for b, n in enumerate(lengths):
        out[b, :n] = x[b, :n].flip(0)
    return out


def test_bilm_loss_equals_torch_lstms_with_copied_weights():
    batch = _batch()
    model = ELMoLM(CFG)
    params = jax.jit(model.init)(jax.random.PRNGKey(0), batch["inputs"], batch["token_chars"])[
        "params"
    ]
    torch.manual_seed(0)
    stacks = {d: [torch.nn.LSTM(P, H, proj_size=P, batch_first=True) for _ in range(2)]
              for d in ("forward", "backward")}  # fmt: skip
    params = jax.tree.map(np.asarray, params)
    for d, lstms in stacks.items():
        for k, lstm in enumerate(lstms):
            params["encoder"][f"{d}_l{k}"] = torch_rnn.cell_from_torch(
                lstm.state_dict(), "lstm", "_l0", projection=True
            )
    _, inter = jax.jit(lambda p: model.apply({"params": p}, batch["inputs"], batch["token_chars"],
                       capture_intermediates=True, mutable=["intermediates"]))(params)  # fmt: skip
    x = torch.tensor(np.asarray(inter["intermediates"]["encoder"]["token_encoder"]
                                ["__call__"][0]))  # fmt: skip
    softmax = torch.nn.Linear(P, V)
    with torch.no_grad():
        softmax.weight.copy_(torch.as_tensor(np.asarray(params["softmax"]["kernel"]).T))
        softmax.bias.copy_(torch.as_tensor(np.asarray(params["softmax"]["bias"])))
        fwd = softmax(_torch_stack(x, stacks["forward"]))
        bwd_rev = _torch_stack(_reverse_rows(x, LENGTHS), stacks["backward"])
        bwd = softmax(_reverse_rows(bwd_rev, LENGTHS))
        ids, w = torch.as_tensor(batch["inputs"]).long(), torch.as_tensor(batch["weights"])
        ce = torch.nn.functional.cross_entropy
        nll_f = ce(fwd[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1), reduction="none")
        nll_b = ce(bwd[:, 1:].reshape(-1, V), ids[:, :-1].reshape(-1), reduction="none")
        wf = w[:, :-1].reshape(-1)
        want = 0.5 * ((nll_f * wf).sum() / wf.sum() + (nll_b * wf).sum() / wf.sum())
    task = tasks.get("bilm")
    sums, _ = jax.jit(lambda p: task.batch_sums(model, p, batch, rng=None, train=False))(params)
    np.testing.assert_allclose(sums["loss_sum"] / sums["weight_sum"], want.item(), rtol=1e-5)
    np.testing.assert_allclose(sums["weight_sum"], batch["weights"].sum())  # the step's count
    metrics = task.train_metrics(sums, batch["weights"].sum())
    np.testing.assert_allclose(metrics["forward_loss"], ((nll_f * wf).sum() / wf.sum()).item(),
                               rtol=1e-5)  # fmt: skip


def test_each_lm_is_causal_in_its_own_direction():
    batch = _batch(1)
    model = ELMoLM(CFG)
    params = jax.jit(model.init)(jax.random.PRNGKey(1), batch["inputs"], batch["token_chars"])[
        "params"
    ]

    @jax.jit
    def encode(chars):
        _, inter = model.apply({"params": params}, batch["inputs"], chars,
                               capture_intermediates=True, mutable=["intermediates"])  # fmt: skip
        return inter["intermediates"]["encoder"]["__call__"][0][0][1:]

    def states(chars):
        return [np.asarray(h) for h in encode(chars)]  # [B, T, 2P]: forward | backward

    t = 3
    changed = batch["token_chars"].copy()
    changed[0, t] = (changed[0, t] + 7) % 261 + 1  # another token at t, row 0 (unpadded)
    for before, after in zip(states(batch["token_chars"]), states(changed)):
        np.testing.assert_array_equal(before[:, :t, :P], after[:, :t, :P])  # forward < t
        np.testing.assert_array_equal(before[:, t + 1 :, P:], after[:, t + 1 :, P:])  # bwd > t
        assert not np.allclose(before[0, t:, :P], after[0, t:, :P])  # forward from t on
        assert not np.allclose(before[0, : t + 1, P:], after[0, : t + 1, P:])  # backward up to t
        np.testing.assert_array_equal(before[1], after[1])  # the other row


def test_frozen_bilm_unchanged_by_a_transfer_step():
    batch = _batch(2)
    cfg = ELMoConfig(**{**CFG.__dict__, "num_classes": 2})
    model = ELMoClassifier(cfg)
    params = jax.jit(model.init)(jax.random.PRNGKey(2), batch["inputs"], batch["token_chars"])[
        "params"
    ]
    frozen = registry.get("elmo").frozen
    assert frozen(cfg) == ("encoder",)
    assert frozen(ELMoConfig(**{**cfg.__dict__, "freeze_bilm": False})) == ()
    labels = jnp.array([0, 1])

    @jax.jit
    def grad(p):
        def loss(p):
            logits = model.apply({"params": p}, batch["inputs"], batch["token_chars"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        return jax.grad(loss)(p)

    grads = grad(params)
    # the job's optimizer as train.setup makes it: AdamW with weight decay on all parameters
    # (the decay moves even a gradient-free tree), the family's subtrees added to its freeze
    opt = defaults.optimizer()
    opt.learning_rate, opt.weight_decay, opt.weight_decay_mask = 1e-2, 0.1, "all"
    opt.schedule, opt.warmup_steps = "constant", 0
    frozen_tx, _ = optim.make_optimizer(opt, 10, also_freeze=frozen(cfg))
    free_tx, _ = optim.make_optimizer(opt, 10)
    for tx, moves in ((frozen_tx, False), (free_tx, True)):
        updates, _ = tx.update(grads, tx.init(params), params)
        new = optax.apply_updates(params, updates)
        same = jax.tree.map(lambda a, b: bool((a == b).all()), params, new)
        assert all(jax.tree.leaves(same["encoder"])) != moves
        for name in ("mix", "hidden", "head"):  # the task's weights learn either way
            assert not all(jax.tree.leaves(same[name]))


def test_the_family_asks_the_data_for_characters():
    from seqjax.configs import common
    from tests.conftest import REPO

    config = common.load_file(REPO / "configs" / "elmo.py", name="cfg_elmo").get_config("")
    config.data.token_chars = 0
    tasks.model_build.fill_data_needs(config)
    assert config.data.token_chars == registry.get("elmo").token_chars == 50
    baselines = common.load_file(REPO / "configs" / "text_baselines.py", name="cfg_tb")
    config = baselines.get_config("")
    tasks.model_build.fill_data_needs(config)
    assert config.data.token_chars == 0  # a family that reads no characters gets none
    config.data.token_chars = 8
    with pytest.raises(ValueError, match="does not read the characters"):
        tasks.model_build.fill_data_needs(config)
