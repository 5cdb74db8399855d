"""``python -m tests.train._fake_gcs ROOT MODULE ARGS...``: runs ``MODULE``'s console entry
(``seqjax.main``, ``seqjax.evaluate``, ``seqjax.sample``) with ``gs://`` served from the local
folder ``ROOT`` (``gs://bucket/x`` is ``ROOT/bucket/x``).

Only the network layer is replaced: fsspec's ``gs``/``gcs`` filesystem (what etils.epath and
so gcsfs users go through) becomes a local filesystem rooted at ``ROOT``, and Orbax's
TensorStore ``gcs`` kvstore becomes the ``file`` driver under the same root; a bucket
without hierarchical namespace is reported. seqjax, etils.epath and Orbax all see and
handle ``gs://`` paths (Orbax's GCS commit-file protocol instead of renames included).
"""

from __future__ import annotations

import os
import sys
import types

import fsspec
from fsspec.implementations.local import LocalFileSystem


def install(root: str) -> None:
    root = os.path.abspath(root)

    class FakeGCS(LocalFileSystem):
        protocol = ("gs", "gcs")
        root_marker = ""

        def __init__(self, *args, finalize_on_close=None, **kwargs):
            del args, finalize_on_close, kwargs
            super().__init__(auto_mkdir=True)

        @classmethod
        def _strip_protocol(cls, path):
            path = os.fspath(path) if not isinstance(path, str) else path
            for prefix in ("gs://", "gcs://"):
                if path.startswith(prefix):
                    path = os.path.join(root, path[len(prefix) :])
            if not path.startswith(root):
                path = os.path.join(root, path.lstrip("/"))
            return LocalFileSystem._strip_protocol(path)

        @staticmethod
        def _bucket_path(p: str) -> str:  # gcsfs returns "bucket/x", without gs://
            return p[len(root) + 1 :] if p.startswith(root + "/") else p

        def glob(self, path, **kwargs):
            return [self._bucket_path(p) for p in super().glob(path, **kwargs)]

        def walk(self, path, *args, **kwargs):
            for top, dirs, files in super().walk(path, *args, **kwargs):
                yield "gs://" + self._bucket_path(top), dirs, files

    fsspec.register_implementation("gs", FakeGCS, clobber=True)
    fsspec.register_implementation("gcs", FakeGCS, clobber=True)

    from orbax.checkpoint._src.path import gcs_utils

    def kvstore(ckpt_path: str) -> dict:
        rest = str(ckpt_path).split("://", 1)[-1]  # gs://bucket/path -> bucket/path
        return {"driver": "file", "path": os.path.join(root, rest.rstrip("/"))}

    gcs_utils.get_kvstore_for_gcs = kvstore
    # Older Orbax (0.11.x) builds the kvstore spec in private helpers of these modules.
    import importlib

    for name in ("tensorstore_utils", "serialization"):
        try:
            module = importlib.import_module(f"orbax.checkpoint._src.serialization.{name}")
        except ImportError:
            continue
        if hasattr(module, "_get_kvstore_for_gcs"):
            module._get_kvstore_for_gcs = kvstore
    gcs_utils.get_bucket = lambda name: types.SimpleNamespace(
        name=name, hierarchical_namespace_enabled=False
    )


if __name__ == "__main__":
    install(sys.argv.pop(1))
    module = sys.argv.pop(1)
    if module == "seqjax.main":
        from seqjax.main import run as entry
    elif module == "seqjax.evaluate":
        from seqjax.evaluate import cli as entry
    else:
        from seqjax.sample import cli as entry
    entry()
