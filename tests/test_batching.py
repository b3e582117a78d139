"""Cutting the files to index into batches: at most N files and M bytes each."""

from __future__ import annotations

import pytest

from flows.ingest import main
from tasks.core.records import SourceFile
from tasks.ingest.pipeline import FIRST_BATCH_FILES, FIRST_BATCH_MB, BatchSettings, file_batches

KIB = 1024


def sources(*sizes_kib: int) -> list[SourceFile]:
    return [
        SourceFile(f"f{i}.md", f"/corpus/f{i}.md", size * KIB, 0, f"h{i}", "text/markdown")
        for i, size in enumerate(sizes_kib)
    ]


def test_batches_hold_at_most_the_file_count_and_are_labelled_in_order():
    batches = file_batches(sources(1, 1, 1, 1, 1), BatchSettings(batch_size=2, batch_mb=1))
    assert [batch.label for batch in batches] == ["[batch 1/3]", "[batch 2/3]", "[batch 3/3]"]
    assert [[s.doc_id for s in batch.files] for batch in batches] == [
        ["f0.md", "f1.md"],
        ["f2.md", "f3.md"],
        ["f4.md"],
    ]


def test_the_first_batch_is_small_so_the_model_starts_early_and_the_next_ones_double():
    batches = file_batches(sources(*[1] * 100), BatchSettings(batch_size=32, batch_mb=1))
    assert FIRST_BATCH_FILES == 4
    assert [len(batch.files) for batch in batches] == [4, 8, 16, 32, 32, 8]


def test_batches_close_before_the_byte_limit_and_a_big_file_goes_alone():
    files = sources(300, 500, 400, 2000, 10, 10, 600, 300)
    batches = file_batches(files, BatchSettings(batch_size=32, batch_mb=1))
    assert [[s.doc_id for s in batch.files] for batch in batches] == [
        ["f0.md"],  # over the first batch's 256 KiB on its own
        ["f1.md"],  # 500 KiB: the next 400 would pass the second batch's 512
        ["f2.md"],
        ["f3.md"],  # over batch_mb on its own
        ["f4.md", "f5.md", "f6.md", "f7.md"],  # 920 KiB: from the third batch on, batch_mb
    ]
    assert [s for batch in batches for s in batch.files] == files, "every file once, in order"
    assert file_batches([], BatchSettings()) == []


def test_the_first_batches_byte_limit_doubles_up_to_batch_mb():
    """Four PDFs of a few hundred KiB made one first batch: the model waited for all four."""
    batches = file_batches(sources(*[200] * 12), BatchSettings(batch_size=32, batch_mb=1))
    assert FIRST_BATCH_MB == 0.25
    assert [len(batch.files) for batch in batches] == [1, 2, 5, 4]


def test_the_command_line_refuses_batch_limits_out_of_bounds(tmp_path, capsys):
    for option in (["--batch-mb", "0"], ["--batch-size", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            main([str(tmp_path), *option])
        assert exit_info.value.code == 2
        assert f"{option[0]}: Input should be greater than" in capsys.readouterr().err
