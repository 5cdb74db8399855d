"""The char-LM peers study (experiments/char_lm_quality/peers.py) at tiny sizes: the peers
are nanoGPT's model, trained on the same batches, timed in turns, ratios from one run.

The PyTorch peer needs the ``bench`` extra (``torch``); its tests skip with that reason
when torch is not installed, and the study then reports the row as skipped.
"""

from __future__ import annotations

import importlib.util
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seqjax.configs import common
from tests.experiments.test_studies_smoke import EXPERIMENTS, load_script

TORCH_MISSING = importlib.util.find_spec("torch") is None
NEEDS_TORCH = pytest.mark.skipif(
    TORCH_MISSING, reason='torch is not installed (pip install -e ".[bench]")'
)


def _text(n: int = 6000, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    words = ["to", "be", "or", "not", "the", "king", "and", "queen", "ROMEO:", "\n"]
    return " ".join(rng.choice(words, n // 4))[:n]


def _nanogpt_params(v: int, t: int, layers: int, e: int) -> int:
    """nanoGPT (bias=False, tied head): wte + wpe + per block (2 LN + 4E^2 attn + 8E^2 MLP)
    + ln_f."""
    return v * e + t * e + layers * (2 * e + 12 * e * e) + e


def test_flax_peer_is_nanogpts_architecture():
    peers = load_script("char_lm_quality/peers.py")
    config = peers.load_config("smoke")
    hp = peers.hparams(config)
    v = 11
    batches = [(np.zeros((2, hp.block_size), np.int32),) * 2]
    _, _, params = peers.flax_contender(config, v, batches, 4)
    n = sum(int(x.size) for x in jax.tree.leaves(params))
    assert n == _nanogpt_params(v, hp.block_size, hp.n_layer, hp.n_embd)
    # Causal: the logits at position i do not depend on tokens after i.
    model = peers.FlaxGPT(v, hp.n_layer, hp.n_head, hp.n_embd, hp.block_size)
    x = jnp.arange(16, dtype=jnp.int32)[None] % v
    y = x.at[0, 10:].set(0)
    a, b = model.apply(params, x), model.apply(params, y)
    np.testing.assert_allclose(a[0, :10], b[0, :10], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_peers_smoke_interleaved_same_run(tmp_path):
    """seqjax and the Flax peer (and PyTorch where installed) train in turns on the same
    batches; the table's ratios are to the peer measured in this run."""
    text = tmp_path / "text.txt"
    text.write_text(_text())
    peers = load_script("char_lm_quality/peers.py")
    payload = peers.main(
        ["--scale", "smoke", "--steps", "4", "--eval-batches", "1", "--text", str(text),
         "--out", str(tmp_path)]
    )  # fmt: skip
    rows = {r["contender"]: r for r in payload["rows"]}
    assert set(rows) == set(peers.CONTENDERS)
    ran = [n for n in peers.CONTENDERS if rows[n]["status"] == "ok"]
    assert {"seqjax", "flax+optax"} <= set(ran)
    assert payload["order_head"] == ran + ran  # A B (C) A B (C): in turns
    for name in ran:
        r = rows[name]
        assert r["steps"] == 4 and math.isfinite(r["val_loss"]) and r["ms_per_step"] > 0
    peer = payload["peer"]
    assert peer == ("flax+optax" if TORCH_MISSING else "pytorch")
    assert rows[peer]["speed_vs_peer"] == pytest.approx(1.0)
    assert rows["seqjax"]["speed_vs_peer"] == pytest.approx(
        rows[peer]["ms_per_step"] / rows["seqjax"]["ms_per_step"]
    )
    if TORCH_MISSING:
        assert "torch is not installed" in rows["pytorch"]["status"]
    assert isinstance(payload["noisy"], bool) and "other_cores" in payload["load"]
    md = (tmp_path / "peers_smoke.md").read_text()
    assert "interleaved in one run" in md and ("noisy" in md or "quiet" in md)


def _torch_module():
    path = EXPERIMENTS / "char_lm_quality" / "nanogpt_torch.py"
    return common.load_file(path, "nanogpt_torch_test")


@NEEDS_TORCH
def test_torch_peer_is_nanogpts_architecture_and_learns():
    nano = _torch_module()
    peers = load_script("char_lm_quality/peers.py")
    hp = peers.hparams(peers.load_config("smoke"))
    v = 11
    model = nano.GPT(v, hp.block_size, hp.n_layer, hp.n_head, hp.n_embd)
    n = sum(p.numel() for p in model.parameters())  # the tied head counts once
    assert n == _nanogpt_params(v, hp.block_size, hp.n_layer, hp.n_embd)
    assert model.lm_head.weight is model.wte.weight
    rng = np.random.default_rng(0)
    seq = np.tile(np.arange(v, dtype=np.int32), 40)  # a learnable cycle
    batches = [peers.CharData.windows(seq, rng, 8, 16) for _ in range(30)]
    hp.lr, hp.warmup, hp.min_lr = 3e-3, 2, 3e-4
    step, val_loss = nano.make_torch_peer(hp, v, batches, 30)
    before = val_loss(batches[:2])
    for _ in range(30):
        step()
    assert val_loss(batches[:2]) < 0.5 * before


def test_nanogpt_lr_schedule_formula():
    if TORCH_MISSING:
        pytest.skip('torch is not installed (pip install -e ".[bench]")')
    nano = _torch_module()
    lr = [nano.nanogpt_lr(i, 1e-3, 100, 2000, 1e-4) for i in (0, 99, 100, 1050, 2000, 2500)]
    assert lr[0] == pytest.approx(1e-3 / 101) and lr[1] == pytest.approx(1e-3 * 100 / 101)
    assert lr[2] == pytest.approx(1e-3) and lr[3] == pytest.approx(5.5e-4)
    assert lr[4] == pytest.approx(1e-4) and lr[5] == pytest.approx(1e-4)
