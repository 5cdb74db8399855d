"""Issue 38, inputs that were accepted or blamed on the wrong thing: a translation whose
target language is its source language (item 10)."""

from __future__ import annotations

import json

import pytest

from seqjax.data import translation
from seqjax.data.sources import DataError


def test_target_language_equal_to_the_source_is_refused(tmp_path):
    path = tmp_path / "en-de.jsonl"
    rows = [{"en": f"File {i} not found", "de": f"Datei {i} nicht gefunden"} for i in range(5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError) as e:
        translation.read_jsonl(str(path), "en", "en")
    msg = str(e.value)
    assert "config.data.target_lang='en'" in msg and "valid" in msg and "'de'" in msg
    pairs, target = translation.read_jsonl(str(path), "en", "de")  # the right one still reads
    assert target == "de" and pairs[0] == ("File 0 not found", "Datei 0 nicht gefunden")
