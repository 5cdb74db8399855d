"""A test evaluation cut short by ``train.test_max_batches`` says so beside its figure:
``result.json``'s test block carries the batches evaluated and the split's batches."""

import json

from seqjax.train import loop


def test_result_json_states_the_evaluated_slice(corpus, helpers, tmp_path):
    config = helpers.tiny_config(corpus, **{"train.num_steps": 2, "train.final_eval": True,
                                            "train.eval_batch_size": 8,
                                            "train.test_max_batches": 1})  # fmt: skip
    loop.train_and_evaluate(config, str(tmp_path))
    test = json.loads((tmp_path / "result.json").read_text())["test"]
    assert test["evaluated_batches"] == 1 and test["split_batches"] > 1
    assert test["count"] == 8 * config.data.seq_len  # one batch of 8 windows, in tokens
