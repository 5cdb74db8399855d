"""The Hugging Face architectures that ship with seqjax, one module each, every one registered
in ``seqjax.convert.registry`` by the ``config.json`` ``architectures`` names it reads."""
