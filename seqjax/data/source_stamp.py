"""Which source files a prepared data set was made from, and a check that they still are.

A prepared TFDS data set is found again by its name (``data_dir/<tfds name>/<config>``), and
the name of a manual-download data set (Fashion-MNIST, IMDB, CIFAR-10, WMT14, ...) does not
depend on the archive it came from: with a shared TFDS folder, a later run whose
``config.data.manual_dir`` holds a different (or damaged) archive would silently train on
the data prepared from the first one. So each preparation writes a stamp,

    <data_dir>/seqjax_sources/<tfds name>/<config>.json: [{candidates, dataset, path, size,
                                                           sha256}, ...]

(every file ``seqjax.data.sources.find_source`` returned), and a run that reuses the prepared
data with a ``manual_dir`` looks the same file names up there: one of another size or
sha256 is named in a ``DataError`` (a file with the stamp's path, size and modification
time is not hashed again).
"""

from __future__ import annotations

import json
import os

from seqjax.data import sources


def stamp_path(data_dir: str, tfds_name: str, config_name: str) -> str:
    return os.path.join(data_dir, "seqjax_sources", tfds_name, f"{config_name or 'default'}.json")


def _describe(path: str) -> dict:
    st = os.stat(path)
    return {
        "path": os.path.realpath(path),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "sha256": sources.sha256_of_files([path]),
    }


def write(path: str, found: list) -> None:
    """Records the sources of a fresh preparation (``sources.recording``'s list)."""
    if not found:
        return
    rows = [
        {"candidates": list(cands), "dataset": dataset, **_describe(p)}
        for cands, dataset, p in found
    ]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(rows, f, indent=1)
    os.replace(tmp, path)


def check(path: str, manual_dir: str | None, prepared: str) -> None:
    """``DataError`` when ``manual_dir`` holds a source unlike the one ``prepared`` came from."""
    if not manual_dir or not os.path.isfile(path):
        return  # nothing to compare with (prepared before stamps, or a download-only set)
    try:
        with open(path) as f:
            rows = json.load(f)
    except (OSError, ValueError):
        return  # a damaged stamp: rewritten by the next fresh preparation
    for row in rows:
        try:
            found = sources.find_source(
                row["candidates"], dataset=row["dataset"], manual_dir=manual_dir, download=False
            )
        except sources.SourceMissingError:
            continue  # the archive was removed after preparing: the prepared data stand
        st = os.stat(found)
        same_file = os.path.realpath(found) == row["path"] and st.st_mtime_ns == row["mtime_ns"]
        if same_file and st.st_size == row["size"]:
            continue
        digest = sources.sha256_of_files([found]) if st.st_size == row["size"] else None
        if digest == row["sha256"]:
            continue
        now = f"{st.st_size:,} bytes" + (f", sha256 {digest[:12]}" if digest else "")
        raise sources.DataError(
            f"config.data.manual_dir={manual_dir!r} has {found} ({now}), but the data prepared "
            f"in {prepared} were made from {row['path']} ({row['size']:,} bytes, sha256 "
            f"{row['sha256'][:12]}); to prepare from this archive use another "
            "config.data.data_dir or delete that folder, else point manual_dir at the original"
        )
