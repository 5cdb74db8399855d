"""In-context evaluation: request-level answers equal lm-evaluation-harness's ``HFLM`` on the
same tiny random GPT-2 folder (contexts truncated on the left, continuations that merge with
the context's last tokens, an empty context, greedy and non-greedy continuations, rolling
windows, generation); the adapter answers through the harness's own ``Instance``s; few-shot
prompts are deterministic for a seed and the k = 0 prompt is the template; metrics and their
standard errors from known log-likelihoods; the command line on an ``hf:`` folder."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from seqjax.tasks import icl
from seqjax.tasks.icl import fewshot, requests
from tests.tasks import _tiny_gpt2 as tiny

LONG = "the sun is warm and the sea is blue and calm and the cat sat on the"  # > 16 tokens
REQUESTS = [
    ("the cat sa", "t on the mat"),  # "sat" merges across the split
    ("the do", "g sat on the log and the"),
    ("", "the dog"),  # empty context: the prefix token
    (LONG, " mat"),  # truncated on the left
    (LONG + " mat and", " the dog sat on the log"),
    ("a bird ", "sang"),  # the trailing space moves to the continuation
]
TEXTS = ["the cat sat on the mat and the dog sat on the log and the bird sang in the tree"]
GENERATE = [("the cat", {"until": ["\n"], "max_gen_toks": 5}),
            ("the sun is warm and", {"until": ["mat"], "max_gen_toks": 6})]  # fmt: skip


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny.save(tmp_path_factory.mktemp("tiny_gpt2"))


@pytest.fixture(scope="module")
def scorer(folder):
    from seqjax.tasks.icl import models

    return icl.Scorer(models.from_hf_folder(folder), batch_size=4)


def test_requests_equal_lm_eval_hflm(folder, scorer):
    pytest.importorskip("accelerate")
    huggingface = pytest.importorskip("lm_eval.models.huggingface")
    from lm_eval.api.instance import Instance

    from seqjax.tasks.icl.harness import SeqjaxLM

    hflm = huggingface.HFLM(pretrained=folder, batch_size=4, max_length=tiny.MAX_LEN,
                            device="cpu", dtype="float32")  # fmt: skip
    gens = scorer.generate_until(GENERATE)
    assert gens == hflm.generate_until(
        [Instance("generate_until", {}, r, i) for i, r in enumerate(GENERATE)]
    )
    assert gens[0] and gens[1]
    reqs = REQUESTS + [("the cat", gens[0][:6])]  # the model's own greedy continuation
    ll_req = [Instance("loglikelihood", {}, r, i) for i, r in enumerate(reqs)]
    theirs = hflm.loglikelihood(ll_req)
    for ours in (scorer.loglikelihood(reqs), SeqjaxLM(scorer.lm, 3).loglikelihood(ll_req)):
        np.testing.assert_allclose([x for x, _ in ours], [x for x, _ in theirs], rtol=1e-5)
        assert [g for _, g in ours] == [g for _, g in theirs]
    assert theirs[-1][1] and not all(g for _, g in theirs)  # both kinds of flag are tested
    assert len(scorer.lm.encode(LONG)) > tiny.MAX_LEN
    roll = [Instance("loglikelihood_rolling", {}, (t,), i) for i, t in enumerate(TEXTS)]
    assert len(scorer.lm.encode(TEXTS[0])) > tiny.MAX_LEN  # several windows
    theirs = hflm.loglikelihood_rolling(roll)
    np.testing.assert_allclose(scorer.loglikelihood_rolling(TEXTS), theirs, rtol=1e-5)
    adapter = SeqjaxLM(scorer.lm, batch_size=2)  # the harness's Instances, other batches
    np.testing.assert_allclose(adapter.loglikelihood_rolling(roll), theirs, rtol=1e-5)
    gen_req = [Instance("generate_until", {}, r, i) for i, r in enumerate(GENERATE)]
    assert adapter.generate_until(gen_req) == gens


def test_gpt_neo_local_layers_equal_lm_eval_hflm(tmp_path):
    """An imported GPT-Neo (a local layer of window 4 < 16 positions) through the same
    requests as the harness's HFLM on its folder."""
    pytest.importorskip("accelerate")
    huggingface = pytest.importorskip("lm_eval.models.huggingface")
    from lm_eval.api.instance import Instance

    from seqjax.tasks.icl import models

    folder = tiny.save(tmp_path, arch="gpt_neo")
    lm = models.from_hf_folder(folder)
    assert [name for name, _ in lm_attention(folder)] == ["dense", "flex"]
    hflm = huggingface.HFLM(pretrained=folder, batch_size=4, max_length=tiny.MAX_LEN,
                            device="cpu", dtype="float32")  # fmt: skip
    reqs = REQUESTS[:4]
    theirs = hflm.loglikelihood([Instance("loglikelihood", {}, r, i) for i, r in enumerate(reqs)])
    ours = icl.Scorer(lm, batch_size=4).loglikelihood(reqs)
    np.testing.assert_allclose([x for x, _ in ours], [x for x, _ in theirs], rtol=1e-5)
    assert [g for _, g in ours] == [g for _, g in theirs]


def lm_attention(folder):
    from seqjax import convert

    return convert.load(folder).config.attention


def test_rolling_windows_cover_each_token_once():
    toks = list(range(10, 33))
    windows = requests.rolling_windows(toks, 0, 8)
    assert sum((pred for _, pred in windows), []) == toks
    for ctx, pred in windows:  # each window is at most 8 inputs ending just before its last
        assert 0 < len(ctx) + len(pred) - 1 <= 8


MC = [{"query": f"q{i}:", "choices": ["aa", "b", "cccc"], "gold": i % 3} for i in range(6)]


def test_fewshot_prompts_deterministic_and_zero_shot_is_template():
    spec = icl.TaskSpec("multiple_choice", template="Question: {query}\nAnswer:")
    assert icl.fewshot_prompts(spec, MC, MC, 0) == [f"Question: q{i}:\nAnswer:" for i in range(6)]
    a = icl.fewshot_prompts(spec, MC, MC, 2, seed=7)
    assert a == icl.fewshot_prompts(spec, MC, MC, 2, seed=7)
    assert a != icl.fewshot_prompts(spec, MC, MC, 2, seed=8)
    for i, prompt in enumerate(a):
        shots = prompt.split("\n\n")
        assert len(shots) == 3 and shots[-1] == f"Question: q{i}:\nAnswer:"
        for shot in shots[:2]:  # a labelled example, never the document itself
            q = shot.split(":")[1].strip()
            assert q != f"q{i}" and shot.endswith(" " + MC[int(q[1:])]["choices"][int(q[1:]) % 3])
    with pytest.raises(ValueError, match="num_fewshot=6 needs 6"):
        icl.fewshot_prompts(spec, MC, MC, 6)


class _Fixed:
    """A scorer whose log-likelihood of a choice is minus its length (so "b" always wins the
    sum, and per character the choices tie and the first wins)."""

    def loglikelihood(self, reqs):
        return [(-float(len(c.strip())), False) for _, c in reqs]


def test_multiple_choice_metrics_and_stderr():
    out = icl.evaluate(_Fixed(), icl.TaskSpec("multiple_choice"), MC, MC, 0)
    acc = np.array([float(d["gold"] == 1) for d in MC])
    assert out["acc"] == pytest.approx(acc.mean())
    assert out["acc_stderr"] == pytest.approx(acc.std(ddof=1) / math.sqrt(len(acc)))
    assert out["acc_norm"] == pytest.approx(np.mean([d["gold"] == 0 for d in MC]))


def test_bad_task_file(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps({"context": "a"}) + "\n")
    with pytest.raises(ValueError, match=r"t.jsonl:1 has no field 'target'"):
        icl.load_jsonl(p, "cloze")
    with pytest.raises(ValueError, match="task kind='qa' is not one of"):
        icl.load_jsonl(p, "qa")
    with pytest.raises(ValueError, match="names field 'missing'"):
        fewshot.TaskSpec("cloze", template="{missing}").text({"context": "a"})


def test_command_line_on_hf_folder(folder, tmp_path):
    from seqjax import evaluate_icl

    cloze = tmp_path / "cloze.jsonl"
    lines = [s.rsplit(" ", 1) for s in tiny.CORPUS[:3]]
    cloze.write_text("".join(json.dumps({"context": c, "target": t}) + "\n" for c, t in lines))
    tr = tmp_path / "tr.jsonl"
    tr.write_text("".join(json.dumps({"source": c, "target": t}) + "\n" for c, t in lines))
    results = evaluate_icl.evaluate(
        evaluate_icl.load_model(f"hf:{folder}"), str(cloze), "cloze", shots=(0, 1), batch_size=4
    )
    assert [r["num_fewshot"] for r in results] == [0, 1] and all(r["n"] == 3 for r in results)
    assert 0 <= results[1]["acc"] <= 1 and results[0]["logprob_stderr"] > 0
    assert results[0]["ppl"] == pytest.approx(math.exp(-results[0]["logprob"]))
    out = evaluate_icl.evaluate(evaluate_icl.load_model(f"hf:{folder}"), str(tr), "translation",
                                shots=(1,), batch_size=4, max_gen_toks=4)[0]  # fmt: skip
    assert {"bleu", "bleu_stderr", "exact_match", "exact_match_stderr"} <= set(out)
    assert len(out["predictions"]) == 3
    with pytest.raises(ValueError, match="--num_fewshot='-1'; valid"):
        evaluate_icl.parse_shots("-1")


def test_sampled_generation_is_seeded(scorer):
    req = [("the cat", {"do_sample": True, "temperature": 5.0, "max_gen_toks": 6})] * 2
    a = scorer.generate_until(req, seed=0)
    assert a == scorer.generate_until(req, seed=0)
    assert a != scorer.generate_until(req, seed=1)


@pytest.mark.slow
def test_command_line_on_a_workdir(tmp_path):
    """A character LM trained a few steps, then ``python -m seqjax.evaluate_icl`` on its
    workdir (one JSON line per k)."""
    import os
    import subprocess
    import sys

    work = tmp_path / "run"
    train = [sys.executable, "-m", "seqjax.main", "--config", "configs/char_lm.py:smoke",
             "--workdir", str(work), "--config.train.num_steps=12",
             "--config.optimizer.warmup_steps=2", "--config.train.eval_every=12",
             "--config.train.checkpoint_every=12"]  # fmt: skip
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_backend_optimization_level=0")
    env["PYTHONPATH"] = str(tiny.REPO) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(train, capture_output=True, text=True, cwd=tiny.REPO, env=env,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    task = tmp_path / "mc.jsonl"
    task.write_text("".join(json.dumps(d) + "\n" for d in MC))
    cmd = [sys.executable, "-m", "seqjax.evaluate_icl", f"--model={work}", f"--task={task}",
           "--kind=multiple_choice", "--num_fewshot=0,1"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tiny.REPO, env=env,
                         timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")]
    assert [r["num_fewshot"] for r in lines] == [0, 1] and all(r["n"] == 6 for r in lines)
