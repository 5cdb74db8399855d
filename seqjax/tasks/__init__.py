"""Tasks as plug-ins: what one kind of data (``DataInfo.task``) asks of the training system.

    task = seqjax.tasks.get("lm")          # or seqjax.tasks.for_run(config, info)
    model = task.build_model(config, task.model_config(config, info))
    sums, _ = task.batch_sums(model, params, batch, rng=None, train=False)

Files: ``base.py`` (``Task``: every hook and its default), ``registry.py`` (``register``,
``get``, ``names``), ``model_build.py`` (``model_config``, ``make_model``, ``build_model``
of a job's task), ``losses.py`` (weighted loss sums), ``sampling.py`` (LM sampling with
the decoding caches), one file per task: ``lm.py``, ``classification.py``, ... A new task
is a new file (``docs/extending.md``, "A new task").
"""

from seqjax.tasks import losses
from seqjax.tasks.base import SUM_KEYS, Task
from seqjax.tasks.model_build import build_model, make_model, model_config
from seqjax.tasks.registry import for_data_config, for_run, get, names, register, unregister

__all__ = ["SUM_KEYS", "Task", "build_model", "for_data_config", "for_run", "get", "losses",
           "make_model", "model_config", "names", "register", "unregister"]  # fmt: skip
