"""Issue 40, item 7: the pystdlib corpus is valid UTF-8 (files in another declared encoding
transcoded, undecodable ones left out and named once, at preparation), so ``vocab='chars'``
turns no byte into U+FFFD; a corpus with invalid UTF-8 is named once, when it is prepared,
not at every evaluate/sample."""

from seqjax.data import corpora


def test_files_in_other_encodings_are_transcoded_and_broken_ones_left_out(tmp_path):
    utf8 = tmp_path / "a.py"
    utf8.write_text("x = 'ü'\n", encoding="utf-8")
    latin1 = tmp_path / "b.py"
    latin1.write_bytes("# -*- coding: latin-1 -*-\ny = 'é'\n".encode("latin-1"))
    broken = tmp_path / "c.py"
    broken.write_bytes(b"z = '\xff\xfe'\n")  # no declaration: UTF-8, and it is not
    data, skipped = corpora.stdlib_corpus([utf8, latin1, broken])
    text = data.decode("utf-8")  # raises if any byte is not UTF-8
    assert "x = 'ü'" in text and "y = 'é'" in text and "z =" not in text
    assert skipped == [str(broken)]


def test_this_pythons_stdlib_corpus_is_valid_utf8():
    data, skipped = corpora.stdlib_corpus(corpora.stdlib_files())
    data.decode("utf-8")  # strict: raises on any invalid byte (the old corpus had some)
    assert len(skipped) <= 3  # a handful of deliberately broken test files at most
