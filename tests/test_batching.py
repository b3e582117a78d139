"""Cutting the files to index into batches: at most N files and M bytes each."""

from __future__ import annotations

from flows.ingest import file_batches, parse_args
from tasks.records import SourceFile

KIB = 1024


def sources(*sizes_kib: int) -> list[SourceFile]:
    return [
        SourceFile(f"f{i}.md", f"/corpus/f{i}.md", size * KIB, 0, f"h{i}", "text/markdown")
        for i, size in enumerate(sizes_kib)
    ]


def test_batches_hold_at_most_the_file_count_and_are_labelled_in_order():
    batches = file_batches(sources(1, 1, 1, 1, 1), size=2, max_bytes=1024 * KIB)
    assert [label for label, _ in batches] == ["[batch 1/3]", "[batch 2/3]", "[batch 3/3]"]
    assert [[s.doc_id for s in part] for _, part in batches] == [
        ["f0.md", "f1.md"],
        ["f2.md", "f3.md"],
        ["f4.md"],
    ]


def test_batches_close_before_the_byte_limit_and_a_big_file_goes_alone():
    files = sources(300, 500, 400, 2000, 10, 10)
    batches = file_batches(files, size=32, max_bytes=1024 * KIB)
    assert [[s.doc_id for s in part] for _, part in batches] == [
        ["f0.md", "f1.md"],  # 800 KiB; the next 400 would pass 1 MiB
        ["f2.md"],
        ["f3.md"],  # over the limit on its own
        ["f4.md", "f5.md"],
    ]
    assert [s for _, part in batches for s in part] == files, "every file once, in order"
    assert file_batches([], size=32, max_bytes=KIB) == []


def test_the_command_line_takes_a_batch_byte_limit(tmp_path):
    assert parse_args([str(tmp_path)]).batch_mb == 4.0
    assert parse_args([str(tmp_path), "--batch-mb", "0.5"]).batch_mb == 0.5
