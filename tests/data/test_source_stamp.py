"""Issue 38, item 13: with a shared TFDS folder, a ``config.data.manual_dir`` holding a
different or damaged archive is named, not silently ignored for the data prepared earlier
from another archive; the same bytes elsewhere are accepted."""

from __future__ import annotations

import shutil

import pytest

import seqjax.data as sd
from seqjax.configs import common
from seqjax.data import sources, store

_images = common.load_file(__file__.replace("test_source_stamp.py", "test_data_images.py"),
                           "seqjax_tests_data_images")  # fmt: skip


def test_another_archive_in_manual_dir_is_named(tmp_path, make_cfg):
    _images.write_fashion_mnist(tmp_path / "a", seed=0)
    cfg = make_cfg(name="fashion_mnist", manual_dir=str(tmp_path / "a"),
                   accept_checksum_mismatch=True, data_dir=str(tmp_path / "tfds"))  # fmt: skip
    first = sd.info(cfg)
    stamps = list((tmp_path / "tfds" / "seqjax_sources").rglob("*.json"))
    assert len(stamps) == 1 and "train-images-idx3-ubyte.gz" in stamps[0].read_text()

    _images.write_fashion_mnist(tmp_path / "b", seed=1)  # other images, same names and sizes
    cfg.manual_dir = str(tmp_path / "b")
    store.builder.cache_clear()
    with pytest.raises(sources.DataError) as e:
        sd.info(cfg)
    msg = str(e.value)
    assert f"config.data.manual_dir={str(tmp_path / 'b')!r}" in msg and "sha256" in msg
    assert "ubyte.gz" in msg and "data_dir" in msg

    damaged = tmp_path / "c"  # a truncated archive: another size, named without hashing
    shutil.copytree(tmp_path / "a", damaged)
    f = damaged / "train-images-idx3-ubyte.gz"
    f.write_bytes(f.read_bytes()[:100])
    cfg.manual_dir = str(damaged)
    store.builder.cache_clear()
    with pytest.raises(sources.DataError, match="100 bytes"):
        sd.info(cfg)

    same = tmp_path / "d"  # the same bytes in another folder: the prepared data are reused
    shutil.copytree(tmp_path / "a", same)
    cfg.manual_dir = str(same)
    store.builder.cache_clear()
    assert sd.info(cfg).split_sizes == first.split_sizes
