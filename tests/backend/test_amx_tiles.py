"""The AMX tile kernels (kernels_avx512amx.cpp): prefill-sized calls of the
packed 32-element-block types on AMX give the scalar reference's bits, like
the VNNI kernels they stand in for, whatever the row count, tail or split.

Two tables are checked: "avx512amx_emulated" (the same kernel with the tile
instructions done in plain C++; runs wherever AVX-512 VNNI does, so CI checks
the data movement and float steps) and "avx512amx" itself where the CPU has
usable tiles (the GPU machine's Xeon)."""

import os
import subprocess
import sys

import numpy as np
import pytest
from gguf import GGMLQuantizationType as GT

from muser._core import _testing as t

from kernel_cases import id_of, random_matrix

ISAS = t.cpu_isas()
AMX_TYPES = [GT.Q4_0, GT.Q4_1, GT.Q5_0, GT.Q5_1, GT.Q8_0]
AMX_TABLES = (["avx512amx_emulated"] if "avx512vnni" in ISAS else []) + (["avx512amx"] if "avx512amx" in ISAS else [])

needs_a_table = pytest.mark.skipif(not AMX_TABLES, reason="needs AVX-512 VNNI (the emulated table) or AMX")


def rows_of(rng, n_rows, n_in):
    """Activation rows of very different magnitudes (every block scale differs)."""
    return (rng.standard_normal((n_rows, n_in)) * rng.uniform(0.01, 100, size=(n_rows, 1))).astype(np.float32)


@needs_a_table
@pytest.mark.parametrize("table", AMX_TABLES)
@pytest.mark.parametrize("qtype", AMX_TYPES, ids=lambda q: q.name)
@pytest.mark.parametrize("n_out,blocks", [(16, 1), (17, 2), (40, 3), (100, 65)])
def test_tile_kernels_give_the_scalar_reference_bits_for_any_row_count(table, qtype, n_out, blocks):
    """16..70 rows: whole 16-row A tiles, tiles plus a tail the VNNI kernel
    takes, odd and even block counts (the kernel pairs blocks), a partial
    last weight group, on one and three threads."""
    rng = np.random.default_rng(1000 * id_of(qtype) + 7 * n_out + blocks)
    n_in = 32 * blocks
    raw = random_matrix(qtype, n_in, n_out, rng)
    x = rows_of(rng, 70, n_in)
    reference = t.matmul(id_of(qtype), raw, n_in, n_out, x, threads=1, isa="scalar")
    for rows in (16, 17, 31, 32, 48, 70):
        for threads in (1, 3):
            got = t.matmul(id_of(qtype), raw, n_in, n_out, x[:rows], threads=threads, isa=table, packed=True)
            assert np.array_equal(got.view(np.uint32), reference[:rows].view(np.uint32)), (rows, threads)


@needs_a_table
@pytest.mark.parametrize("table", AMX_TABLES)
@pytest.mark.parametrize("qtype", [GT.Q4_0, GT.Q8_0], ids=lambda q: q.name)
def test_a_row_split_prefill_on_tiles_keeps_every_rows_bits(table, qtype):
    """Row blocks of any planned thread count, and any row alone, give the
    bits of one pass over all rows: a row's value does not depend on whether
    a tile or the VNNI tail computed it."""
    rng = np.random.default_rng(90 + id_of(qtype))
    n_in, n_out = 32 * 9, 70
    raw = random_matrix(qtype, n_in, n_out, rng)
    x = rows_of(rng, 203, n_in)
    whole = t.matmul(id_of(qtype), raw, n_in, n_out, x, threads=1, isa=table, packed=True, split_rows=False)
    for plan_threads in (2, 5, 16):
        split = t.matmul(id_of(qtype), raw, n_in, n_out, x, threads=3, isa=table, packed=True,
                         plan_threads=plan_threads)
        assert np.array_equal(split.view(np.uint32), whole.view(np.uint32)), plan_threads
    for r in (0, 15, 16, 200, 202):
        alone = t.matmul(id_of(qtype), raw, n_in, n_out, x[r:r + 1], threads=1, isa=table, packed=True)
        assert np.array_equal(alone[0].view(np.uint32), whole[r].view(np.uint32)), r


@needs_a_table
@pytest.mark.parametrize("table", AMX_TABLES)
def test_the_tile_table_keeps_the_vnni_tables_other_kernels(table):
    """Types without tile kernels (Q4_K, Q6_K, F16) run the VNNI table's
    kernels there: same bits."""
    rng = np.random.default_rng(3)
    for qtype in (GT.Q4_K, GT.Q6_K, GT.F16):
        n_in = 512
        raw = random_matrix(qtype, n_in, 33, rng)
        x = rows_of(rng, 40, n_in)
        vnni = t.matmul(id_of(qtype), raw, n_in, 33, x, threads=2, isa="avx512vnni")
        got = t.matmul(id_of(qtype), raw, n_in, 33, x, threads=2, isa=table)
        assert np.array_equal(got.view(np.uint32), vnni.view(np.uint32)), qtype.name


def isas_in_a_child(env_update):
    env = dict(os.environ, **env_update)
    code = "from muser._core import _testing as t; print(','.join(t.cpu_isas()), t.best_isa())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    names, best = out.stdout.split()
    return names.split(","), best


def test_amx_is_chosen_only_where_tiles_run_and_muser_cpu_amx_0_turns_it_off():
    """A machine whose CPU, OS and kernel grant the tiles (and where a child
    process ran one) picks avx512amx as its best table; MUSER_CPU_AMX=0 falls
    back to avx512vnni; without AMX asking for it is a clear error."""
    names, best = isas_in_a_child({"MUSER_CPU_AMX": "0"})
    assert "avx512amx" not in names
    if "avx512vnni" in names:
        assert best == "avx512vnni"
    if "avx512amx" in ISAS:
        assert t.best_isa() == "avx512amx"
    else:
        with pytest.raises(ValueError, match="avx512amx"):
            t.matmul(id_of(GT.Q8_0), random_matrix(GT.Q8_0, 32, 1, np.random.default_rng(0)), 32, 1,
                     np.ones((16, 32), np.float32), threads=1, isa="avx512amx")


def test_the_emulated_table_is_refused_without_avx512_vnni_or_under_another_name():
    with pytest.raises(ValueError, match="instruction set"):
        t.matmul(id_of(GT.Q8_0), random_matrix(GT.Q8_0, 32, 1, np.random.default_rng(0)), 32, 1,
                 np.ones((16, 32), np.float32), threads=1, isa="avx512amx_tiles")
    if "avx512vnni" not in ISAS:
        with pytest.raises(ValueError, match="VNNI"):
            t.matmul(id_of(GT.Q8_0), random_matrix(GT.Q8_0, 32, 1, np.random.default_rng(0)), 32, 1,
                     np.ones((16, 32), np.float32), threads=1, isa="avx512amx_emulated")
