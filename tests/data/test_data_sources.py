"""Source files: enwik8/text8 zips, checksums, and the errors for missing or corrupt files."""

from __future__ import annotations

import hashlib
import zipfile

import numpy as np
import pytest

import seqjax.data as sd
from seqjax.data import store


def _write_zip(path, member: str, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(member, data)
    return path


@pytest.fixture(scope="session")
def synthetic(tmp_path_factory):
    """A manual_dir with small enwik8.zip / text8.zip in the official format."""
    root = tmp_path_factory.mktemp("manual")
    rng = np.random.default_rng(0)
    enwik8 = bytes(rng.integers(0, 256, 200_000, dtype=np.uint8))
    text8 = bytes(
        np.frombuffer(b"abcdefghijklmnopqrstuvwxyz ", np.uint8)[rng.integers(0, 27, 100_000)]
    )
    _write_zip(root / "enwik8.zip", "enwik8", enwik8)
    _write_zip(root / "text8" / "text8.zip", "text8", text8)  # a '<dataset>/' sub-folder works
    return root, {"enwik8": enwik8, "text8": text8}


@pytest.mark.parametrize(
    "name,vocab,vocab_size", [("enwik8", "bytes", 256), ("text8", "chars", 27)]
)
def test_zip_corpora_standard_split(make_cfg, synthetic, name, vocab, vocab_size):
    root, data = synthetic
    cfg = make_cfg(name=name, manual_dir=str(root), vocab=vocab, accept_checksum_mismatch=True)
    info = sd.info(cfg)
    n = len(data[name])
    # First 90% / next 5% / last 5% (90M/5M/5M for the real 100M files).
    assert info.split_sizes == {"train": 0.9 * n, "validation": 0.05 * n, "test": 0.05 * n}
    assert info.vocab_size == vocab_size
    zip_path = root / "enwik8.zip" if name == "enwik8" else root / "text8" / "text8.zip"
    assert info.fingerprint == hashlib.sha256(zip_path.read_bytes()).hexdigest()
    key = store.dataset_key(cfg)
    test = store.tokens(key, "test", vocab)
    if vocab == "bytes":  # the last 5% of the bytes
        assert bytes(test.astype(np.uint8)) == data[name][int(0.95 * n) :]
    else:  # the last 5% of the characters
        assert info.decode(test) == data[name][int(0.95 * n) :].decode("ascii")
    batch = next(sd.make(cfg, split="validation"))
    assert batch["inputs"].max() < vocab_size


def test_unknown_checksum_is_refused(make_cfg, synthetic, tmp_path):
    root, _ = synthetic
    cfg = make_cfg(name="enwik8", manual_dir=str(root), data_dir=str(tmp_path))
    with pytest.raises(sd.ChecksumMismatchError) as e:
        sd.info(cfg)
    msg = str(e.value)
    assert "547994d9980ebed1288380d652999f38a14fe291a6247c157c3d33d4932534bc" in msg
    assert "accept_checksum_mismatch" in msg and "mattmahoney.net/dc/enwik8.zip" in msg
    # Data prepared with the mismatch accepted are not reused silently without it.
    cfg.accept_checksum_mismatch = True
    sd.info(cfg)
    cfg.accept_checksum_mismatch = False
    with pytest.raises(sd.ChecksumMismatchError, match="prepared data"):
        sd.make(cfg, split="train")


def test_missing_zip_says_where_to_put_it(make_cfg, tmp_path):
    with pytest.raises(sd.SourceMissingError) as e:
        sd.info(make_cfg(name="text8", manual_dir=str(tmp_path), data_dir=str(tmp_path / "tfds")))
    msg = str(e.value)
    assert (
        "text8.zip" in msg and str(tmp_path) in msg and "http://mattmahoney.net/dc/text8.zip" in msg
    )
    assert "manual_dir" in msg and "download=False" in msg


def test_corrupt_zip(make_cfg, tmp_path):
    (tmp_path / "enwik8.zip").write_bytes(b"PK\x03\x04 this is not a zip file")
    with pytest.raises(sd.ChecksumMismatchError, match="sha256"):
        sd.info(make_cfg(name="enwik8", manual_dir=str(tmp_path), data_dir=str(tmp_path / "d")))
    with pytest.raises(sd.ChecksumMismatchError, match="not a valid enwik8.zip"):
        sd.info(
            make_cfg(
                name="enwik8",
                manual_dir=str(tmp_path),
                data_dir=str(tmp_path / "d"),
                accept_checksum_mismatch=True,
            )
        )


def test_modified_known_text_file_is_refused(make_cfg, shared_data, tmp_path):
    data = bytearray((shared_data / "tinyshakespeare" / "input.txt").read_bytes())
    data[1000] ^= 1
    path = tmp_path / "tinyshakespeare" / "input.txt"
    path.parent.mkdir()
    path.write_bytes(bytes(data))
    with pytest.raises(sd.ChecksumMismatchError, match="86c4e6aa9db7c042"):
        sd.info(make_cfg(name="text_file", path=str(path)))
    info = sd.info(make_cfg(name="text_file", path=str(path), accept_checksum_mismatch=True))
    assert info.fingerprint == hashlib.sha256(bytes(data)).hexdigest()


def test_text_file_errors_and_several_files(make_cfg, tmp_path):
    with pytest.raises(ValueError, match="config.data.path is empty"):
        sd.info(make_cfg(name="text_file"))
    with pytest.raises(sd.SourceMissingError, match="nope.txt does not exist"):
        sd.info(make_cfg(name="text_file", path=str(tmp_path / "nope.txt")))
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("héllo wörld\n" * 300)
    b.write_text("second file ✓\n" * 300)
    info = sd.info(make_cfg(name="text_file", path=f"{a},{b}", vocab="chars", seq_len=16))
    whole = a.read_bytes() + b.read_bytes()
    assert info.fingerprint == hashlib.sha256(whole).hexdigest()
    assert sum(info.split_sizes.values()) == len(whole.decode())  # chars, not bytes
    assert info.decode(info.encode("wörld")) == "wörld"


def test_missing_imdb_tarball(make_cfg, tmp_path):
    with pytest.raises(sd.SourceMissingError) as e:
        sd.info(make_cfg(name="imdb_bytes", manual_dir=str(tmp_path), data_dir=str(tmp_path / "d")))
    msg = str(e.value)
    assert "aclImdb_v1.tar.gz" in msg and "ai.stanford.edu" in msg and str(tmp_path) in msg


def test_corrupt_imdb_tarball(make_cfg, tmp_path):
    (tmp_path / "aclImdb_v1.tar.gz").write_bytes(b"\x1f\x8b\x08 truncated download")
    cfg = make_cfg(name="imdb_bytes", manual_dir=str(tmp_path), data_dir=str(tmp_path / "d"))
    with pytest.raises(sd.ChecksumMismatchError, match="c40f74a18d3b61f9"):
        sd.info(cfg)
    cfg.accept_checksum_mismatch = True
    with pytest.raises(sd.ChecksumMismatchError, match="cannot read .* corrupt"):
        sd.info(cfg)
