"""Training system: config validation, mesh/sharding, train state and step, Orbax
checkpoints, metrics, and the loop (``loop.train_and_evaluate``); entry point
``python -m seqjax.main``."""
