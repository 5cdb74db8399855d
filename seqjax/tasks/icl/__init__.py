"""In-context evaluation of causal LMs (zero-, one- and few-shot, Brown et al. 2020 §2): the
request types of lm-evaluation-harness (``requests``), prompts, tasks from local JSONL files
and their metrics (``fewshot``), the model of an ``hf:`` folder (``models``) and an adapter
to the harness's own ``LM`` interface (``harness``, needs ``pip install lm-eval``).
Command line: ``python -m seqjax.evaluate_icl``."""

from seqjax.tasks.icl.fewshot import TaskSpec, evaluate, fewshot_prompts, load_jsonl
from seqjax.tasks.icl.requests import CausalLM, Scorer

__all__ = ["CausalLM", "Scorer", "TaskSpec", "evaluate", "fewshot_prompts", "load_jsonl"]
