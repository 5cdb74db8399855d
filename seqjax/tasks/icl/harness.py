"""A seqjax causal LM behind lm-evaluation-harness's ``LM`` interface, so the harness's own
tasks (where it has their data) run on a seqjax model (``pip install lm-eval``; in the
``test`` extra)::

    import lm_eval
    from seqjax import evaluate_icl
    from seqjax.tasks.icl.harness import SeqjaxLM

    lm = SeqjaxLM(evaluate_icl.load_model("hf:path/to/gpt_neo"), batch_size=16)
    lm_eval.simple_evaluate(model=lm, tasks=["lambada_openai"], num_fewshot=0)

Each request type is answered by ``seqjax.tasks.icl.requests.Scorer`` (the harness's
encoding, truncation and order); ``Instance.args`` is ``(context, continuation)``, ``(text,)``
or ``(context, gen_kwargs)``.
"""

from __future__ import annotations

from lm_eval.api.model import LM

from seqjax.tasks.icl.requests import CausalLM, Scorer


class SeqjaxLM(LM):
    """lm-evaluation-harness's ``LM`` over a ``CausalLM``."""

    def __init__(self, lm: CausalLM, batch_size: int = 8, seed: int = 0):
        super().__init__()
        self.scorer = Scorer(lm, batch_size=batch_size)
        self.seed = seed

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        return self.scorer.loglikelihood([tuple(r.args) for r in requests])

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        return self.scorer.loglikelihood_rolling([r.args[0] for r in requests])

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        return self.scorer.generate_until([tuple(r.args) for r in requests], seed=self.seed)
