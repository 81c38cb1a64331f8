"""benchmarks/bench_thread_scaling.py: its weight accounting and one small run."""

from __future__ import annotations

import re

import pytest

from benchmarks import bench_thread_scaling as bench
from muser import _core


def test_a_step_reads_every_tensor_but_the_rows_of_an_untied_embedding_table(tiny_model):
    path = str(tiny_model("llama", "Q4_0", tied_output=False))
    infos = {name: (shape, n_bytes) for name, _type, shape, _offset, n_bytes in _core.GgufFile.open(path).tensor_infos()}
    assert "output.weight" in infos
    embd_shape, embd_bytes = infos["token_embd.weight"]
    everything = sum(n for _, n in infos.values())

    step, total = bench.weight_bytes_per_step(path)

    assert total == everything
    assert step == everything - embd_bytes + embd_bytes // embd_shape[1]


def test_a_tied_embedding_table_is_read_whole_as_the_output_projection(tiny_model):
    path = str(tiny_model("llama", "Q4_0", tied_output=True))
    names = [name for name, *_ in _core.GgufFile.open(path).tensor_infos()]
    assert "output.weight" not in names

    step, total = bench.weight_bytes_per_step(path)

    assert step == total


def test_the_table_has_a_row_per_thread_count_with_the_bandwidth_of_each_decode_cell(tiny_model, capsys):
    path = str(tiny_model("llama", "Q4_0", tied_output=False))
    step, _ = bench.weight_bytes_per_step(path)

    assert bench.main([path, "--threads", "1,2", "--prompt", "16", "--steps", "4", "--group-steps", "3"]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert f"weights/step {step / 1e6:.1f} MB" in lines[0]
    rows = [line for line in lines if re.match(r"^\s+\d+ \|", line)]
    assert [int(r.split("|")[0]) for r in rows] == [1, 2]
    for row in rows:
        prefill, decode, decode_gbs, group, group_gbs = (float(c) for c in row.split("|")[1:])
        assert prefill > 0 and decode > 0 and group > 0
        # Rounded to one decimal in the table: compare at that precision.
        assert decode_gbs == pytest.approx(step * decode / 1e9, abs=0.051)
        assert group_gbs == pytest.approx(step * group / 4 / 1e9, abs=0.051)


def test_bad_thread_lists_are_usage_errors(tiny_model):
    path = str(tiny_model("llama", "Q4_0"))
    for bad in ("0", "a,b", ""):
        with pytest.raises(SystemExit) as stopped:
            bench.main([path, "--threads", bad])
        assert stopped.value.code == 2
