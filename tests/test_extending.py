"""The extension recipes of ``docs/extending.md``, run: a new attention mechanism is its
scores + its mask + one ``numerics`` call and one ``register``; it then works in every model
(here the LM, trained one step) and equals the flex ``sliding_window`` pattern it restates.
A new task (the doc's code block, executed as printed) trains through the loop's train step.

Legend: B batch, T length, H heads, D head dim.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from seqjax.attention import flex, registry
from seqjax.configs import common
from seqjax.models import TransformerConfig, TransformerLM

NAME = "window"  # the name the doc registers


# --- the whole new mechanism (docs/extending.md, "A new attention mechanism"), as printed -----


def _doc_block(heading: str) -> str:
    """The first ```python block after ``heading`` in docs/extending.md."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()
    section = text[text.index(heading) :]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("```", start)]


MECHANISM_BLOCK = _doc_block("## A new attention mechanism")


@pytest.fixture
def registered(monkeypatch):
    """The doc's mechanism file executed as a module of its own (it registers "window")."""
    module = types.ModuleType("my_attention")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    registry._REGISTRY.pop(NAME, None)
    exec(compile(MECHANISM_BLOCK, "docs/extending.md", "exec"), module.__dict__)  # noqa: S102
    assert registry.spec(NAME).fn is module.window_attention
    yield NAME
    registry._REGISTRY.pop(NAME)


def _qkv(b=2, t=24, h=2, d=8, seed=0):
    ks = jax.random.split(jax.random.PRNGKey(seed), 3)
    return [jax.random.normal(k_, (b, t, h, d), jnp.float32) for k_ in ks]


@pytest.mark.parametrize("causal", [False, True])
def test_new_mechanism_equals_the_flex_pattern_it_restates(registered, causal):
    q, k, v = _qkv()
    ours = registry.get(registered)(q, k, v, causal=causal, window=3)
    theirs = flex.flex_attention(
        q, k, v, causal=causal, pattern="sliding_window", window=3, implementation="masked"
    )
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    g1 = jax.grad(lambda q_: registry.get(registered)(q_, k, v, causal=causal, window=3).sum())(q)
    g2 = jax.grad(
        lambda q_: flex.flex_attention(
            q_, k, v, causal=causal, pattern="sliding_window", window=3, implementation="masked"
        ).sum()
    )(q)
    np.testing.assert_allclose(g1, g2, rtol=1e-4, atol=1e-5)


def test_new_mechanism_trains_in_the_lm(registered):
    cfg = TransformerConfig(
        vocab_size=40, num_layers=2, d_model=32, num_heads=4, max_len=16,
        attention=((registered, (("window", 2),)),),
    )  # fmt: skip
    model = TransformerLM(cfg)
    tok = jax.random.randint(jax.random.PRNGKey(1), (2, 16), 0, 40)
    params = model.init(jax.random.PRNGKey(0), tok)["params"]

    def loss(p):
        logits = model.apply({"params": p}, tok[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tok[:, 1:]).mean()

    tx = optax.adam(1e-2)
    opt = tx.init(params)
    loss_and_grad = jax.jit(jax.value_and_grad(loss))
    l0, g = loss_and_grad(params)
    for _ in range(5):
        updates, opt = tx.update(g, opt, params)
        params = optax.apply_updates(params, updates)
        l1, g = loss_and_grad(params)
    assert np.isfinite(l0) and l1 < l0
    # Causal with a window: position 10's logits ignore tokens more than 2 back (per layer,
    # so at most 2 layers x 2 = 4 positions back).
    changed = tok.at[:, 3].set((tok[:, 3] + 1) % 40)
    apply = jax.jit(lambda t: model.apply({"params": params}, t))
    a, b = apply(tok), apply(changed)
    np.testing.assert_allclose(a[:, 8:], b[:, 8:], rtol=1e-5, atol=1e-5)
    assert not np.allclose(a[:, 3:8], b[:, 3:8])


# --- "A new task" (docs/extending.md): the code block is executed as printed ---------------


@pytest.fixture
def doc_task(monkeypatch):
    """The doc's task file, run as a module of its own (Flax modules need a real module)."""
    from seqjax import tasks

    module = types.ModuleType("doc_task_example")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(_doc_block("## A new task"), "docs/extending.md", "exec"), module.__dict__)  # noqa: S102
    yield module.ReverseTask
    tasks.unregister("reverse_example")


def _reverse_batch(rng, b=8, s=8, vocab=12):
    """Source: s - 1 ids in [2, vocab) then a pad; targets: the ids reversed, then EOS = 1."""
    ids = rng.integers(2, vocab, (b, s - 1)).astype(np.int32)
    source = np.concatenate([ids, np.zeros((b, 1), np.int32)], axis=1)
    targets = np.concatenate([ids[:, ::-1], np.ones((b, 1), np.int32)], axis=1)
    return {"inputs": source, "targets": targets, "weights": np.ones((b, s), np.float32)}


def test_new_task_from_the_doc_trains_through_the_train_step(doc_task):
    from seqjax import data as data_lib
    from seqjax import tasks
    from seqjax.train import defaults, optim, sharding, state
    from seqjax.train import step as step_lib

    config = defaults.base(data_lib.default_config())
    config.data.seq_len, config.data.batch_size = 8, 8
    config.model.update(num_layers=1, d_model=32, num_heads=2, max_len=16)
    config.train.num_steps = 40
    config.train.label_smoothing = 0.1
    config.optimizer.update(learning_rate=1e-2, warmup_steps=0)
    config.mesh.data = 1
    info = SimpleNamespace(task="reverse_example", vocab_size=12, seq_len=8, pad_id=0)

    assert "reverse_example" in tasks.names()
    task = tasks.for_run(config, info)  # the registry's task, configured from the config
    assert isinstance(task, doc_task) and task.label_smoothing == 0.1
    assert task.input_length(config) == config.model.max_len  # [source; decoder inputs]
    model = task.build_model(config, task.model_config(config, info))
    tx, schedule = optim.make_optimizer(config.optimizer, config.train.num_steps)
    mesh = sharding.make_mesh(config.mesh)
    _, shardings, init = state.create_state(model, tx, task.init_shapes(config, info), 0, mesh)
    fn = step_lib.make_train_step(model, task, tx, schedule, accum_steps=2, mesh=mesh)
    train_step = step_lib.jit_train_step(fn, shardings, mesh)
    rng = np.random.default_rng(0)
    st, losses = init(), []
    with sharding.rules_and_mesh(mesh):
        for _ in range(40):
            st, m = train_step(st, sharding.global_batch(_reverse_batch(rng), mesh))
            losses.append(float(m["loss"]))
    assert np.isfinite(losses).all() and np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5

    # Evaluation sums: smoothed loss, unsmoothed NLL (perplexity), count.
    batch = _reverse_batch(rng)
    params = jax.device_get(st["params"])
    sums, _ = task.batch_sums(model, params, batch, rng=None, train=False)
    summary = task.eval_summary(jax.device_get(sums), config)
    assert summary["count"] == 64.0 and not np.isclose(sums["loss_sum"], sums["nll_sum"])
    np.testing.assert_allclose(summary["perplexity"], np.exp(sums["nll_sum"] / 64), rtol=1e-6)
    # A malformed batch is refused by name before anything compiles.
    with pytest.raises(ValueError, match=r"batch\['targets'\] must be int32 of rank 2"):
        task.check_batch({**batch, "targets": batch["targets"][:, 0]})


# --- the mechanism as a module of one's own: command-line options, --import, restore ------

_train = common.load_file(
    Path(__file__).parent / "train" / "conftest.py", "seqjax_tests_train_conftest"
)
corpus = _train.corpus  # the tiny training corpus (session fixture)
REPO = Path(__file__).resolve().parents[1]
CHAR_LM = str(REPO / "configs" / "char_lm.py")


def test_options_of_any_registered_mechanism_are_flags(registered):
    from seqjax.train import config_validation, errors, extensions

    argv = ["seqjax-train", f"--config={CHAR_LM}:smoke", "--config.model.attention=window",
            "--config.model.attention_options.window.window=8",
            "--config.model.attention_options.dense.implementation", "chunked"]  # fmt: skip
    assert errors.config_file_problem(argv) is None  # was: "has no field 'window'"
    rest, found = extensions.split_option_overrides(argv)
    assert rest == argv[:3]
    assert found == [("window", "window", "8"), ("dense", "implementation", "chunked")]
    config = common.load_file(CHAR_LM).get_config("smoke")
    config.lock()  # as config_flags leaves it
    extensions.apply_option_overrides(config, found)
    assert config.model.attention_options.window.window == 8  # an int, not "8"
    assert config.model.attention_options.dense.implementation == "chunked"
    with pytest.raises(config_validation.ConfigError, match=r"window.*valid options: .*'window'"):
        extensions.apply_option_overrides(config, [("window", "windw", "8")])
    # A name that is not a registered mechanism still names the valid fields.
    bad = [*argv[:2], "--config.model.attention_options.windw.window=8"]
    assert "has no field 'windw'" in errors.config_file_problem(bad)


def test_a_missing_extension_is_named_with_its_module(tmp_path):
    from seqjax.train import extensions

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "run_info.0.json").write_text(
        '{"extensions": {"attention": {"window": "my_attention"},'
        ' "task": {"reverse_example": "reverse_task"}}}'
    )
    config = common.load_file(CHAR_LM).get_config("smoke")
    config.model.attention = "window"
    with pytest.raises(extensions.ExtensionError) as e:
        extensions.check_restorable(config, str(tmp_path))
    assert "'window' (registered by module 'my_attention')" in str(e.value)
    assert "'reverse_example' (registered by module 'reverse_task')" in str(e.value)
    config.imports = ("reverse_task",)
    with pytest.raises(
        extensions.ExtensionError, match=r"'reverse_task', which cannot be imported"
    ):
        extensions.check_restorable(config, str(tmp_path))


def test_mechanism_module_trains_from_the_command_line_and_evaluates(tmp_path, corpus):
    """The doc's commands: the block saved as my_attention.py on PYTHONPATH, --import it,
    its option as a flag; evaluate imports it again, and names it when it is gone."""
    ext = tmp_path / "project"
    ext.mkdir()
    (ext / "my_attention.py").write_text(MECHANISM_BLOCK)
    work = tmp_path / "window"
    env = _train.subprocess_env(corpus)
    env["PYTHONPATH"] = f"{ext}{os.pathsep}{env['PYTHONPATH']}"
    cmd = _train.main_command(work, corpus, **{"train.num_steps": 4})
    cmd += ["--import", "my_attention", "--config.model.attention=window",
            "--config.model.attention_options.window.window=8"]  # fmt: skip
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "window(window=8) x 2 layers" in proc.stderr  # the run header
    saved = json.loads((work / "config.json").read_text())
    assert saved["imports"] == ["my_attention"]
    assert saved["model"]["attention_options"]["window"] == {"window": 8}
    info = json.loads((work / "run_info.0.json").read_text())
    assert info["extensions"]["attention"] == {"window": "my_attention"}

    evaluate = [sys.executable, "-m", "seqjax.evaluate", f"--workdir={work}", "--max_batches=1"]
    ok = subprocess.run(evaluate, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr[-3000:]
    line = json.loads(ok.stdout)
    assert line["step"] == 4 and isinstance(line["count"], int)  # a count, not 1734.0
    assert ok.stderr.strip() == ""  # no library lines
    env["PYTHONPATH"] = env["PYTHONPATH"].split(os.pathsep, 1)[1]  # the module is gone
    gone = subprocess.run(evaluate, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert gone.returncode == 2 and gone.stdout == ""
    assert "'my_attention', which cannot be imported" in gone.stderr
    assert "PYTHONPATH" in gone.stderr and "no checkpoint" not in gone.stderr


def test_training_names_an_unregistered_mechanism_and_resumes_with_the_runs_imports(
    registered, tmp_path
):
    from seqjax.train import extensions

    config = common.load_file(CHAR_LM).get_config("smoke")
    config.model.attention = "windw"
    with pytest.raises(extensions.ExtensionError, match=r"'windw'.*--import MODULE"):
        extensions.prepare_training(config, str(tmp_path))
    # A resume without --import: the run's recorded imports are imported and kept.
    (tmp_path / "config.json").write_text('{"imports": ["my_attention"]}')
    config.model.attention = "window"
    extensions.prepare_training(config, str(tmp_path))
    assert tuple(config.imports) == ("my_attention",)


# --- the doc's commands, every line as printed, each in a process of its own (issue 40) ----


def _doc_commands(heading: str = "## A new attention mechanism") -> list[str]:
    """The commands of the first ```bash block after ``heading`` (continuations joined)."""
    text = (REPO / "docs" / "extending.md").read_text()
    section = text[text.index(heading) :]
    start = section.index("```bash\n") + len("```bash\n")
    block = section[start : section.index("```", start)].replace("\\\n", " ")
    return [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]


def test_every_command_of_the_recipe_finds_the_users_module():
    """Each command runs in a fresh shell: each must put the module's folder on PYTHONPATH
    (evaluate and sample import the run's ``config.imports`` again)."""
    commands = _doc_commands()
    assert [c.split(" python -m ")[1].split()[0] for c in commands] == [
        "seqjax.main", "seqjax.evaluate", "seqjax.sample"
    ]  # fmt: skip
    for command in commands:
        assert command.startswith("PYTHONPATH=.:$PYTHONPATH python -m "), command


@pytest.mark.slow  # the char_lm smoke trains for about a minute, then evaluate and sample
def test_the_recipe_runs_as_printed_line_by_line(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "my_attention.py").write_text(MECHANISM_BLOCK)
    env = dict(os.environ, PYTHONPATH=str(REPO))  # seqjax as installed: this checkout
    outputs = []
    for command in _doc_commands():
        proc = subprocess.run(["bash", "-c", command], cwd=project, env=env,
                              capture_output=True, text=True, timeout=900)  # fmt: skip
        assert proc.returncode == 0, (command, proc.stderr[-3000:])
        outputs.append(proc.stdout)
        if not outputs[1:]:  # training: the run header names the mechanism and its option
            assert "window(window=8) x 2 layers" in proc.stderr
    evaluation = json.loads(outputs[1].strip().splitlines()[-1])
    assert evaluation["split"] == "test" and np.isfinite(evaluation["loss"])
    assert outputs[2].strip()  # the sampled text
    saved = json.loads((project / "runs" / "window" / "config.json").read_text())
    assert saved["imports"] == ["my_attention"]
