"""The Metal emulator itself: it must expose the bugs the kernel suite relies
on it to expose (a missing barrier, a barrier after a return, divergent simd
calls, out-of-bounds accesses) and implement simd functions as MSL does."""

import numpy as np
import pytest

from metal_emulator_harness import ORDERS

pytestmark = pytest.mark.metal_emulator

N = 64  # two simdgroups


def test_missing_barrier_gives_order_dependent_results(metal_emulator):
    results = {}
    for order in ORDERS:
        done = metal_emulator.run_raw("selftest_missing_barrier", threads=N, n_out=N, threadgroup_bytes=4 * N,
                                      order=order)
        assert done.returncode == 0, done.stderr
        results[order] = done.out
    # Forward: thread i runs to its end before i + 1 writes its slot, so it
    # reads the 0xff fill (NaN); reverse: every slot it reads is written.
    assert np.isnan(results["forward"][: N - 1]).all()
    np.testing.assert_array_equal(results["reverse"][: N - 1], np.arange(1, N, dtype=np.float32))
    assert not np.array_equal(results["forward"], results["reverse"], equal_nan=True)


@pytest.mark.parametrize("order", ORDERS)
def test_barrier_makes_results_order_independent(metal_emulator, order):
    done = metal_emulator.run_raw("selftest_with_barrier", threads=N, n_out=N, threadgroup_bytes=4 * N, order=order)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(done.out, (np.arange(N) + 1) % N)


def test_barrier_after_a_return_is_reported(metal_emulator):
    done = metal_emulator.run_raw("selftest_barrier_after_return", threads=N, n_out=N)
    assert done.returncode == 3
    assert "threadgroup_barrier in selftest_barrier_after_return reached by 63 threads after 1 threads returned" \
        in done.stderr


def test_divergent_simd_calls_are_reported(metal_emulator):
    done = metal_emulator.run_raw("selftest_simd_divergence", threads=N, n_out=N)
    assert done.returncode == 3
    assert "simdgroup divergence in selftest_simd_divergence" in done.stderr
    assert "simd_sum" in done.stderr and "simd_max" in done.stderr


@pytest.mark.parametrize("order", ORDERS)
def test_simd_sum_covers_the_active_lanes(metal_emulator, order):
    done = metal_emulator.run_raw("selftest_partial_simd_sum", threads=N, n_out=N, order=order)
    assert done.returncode == 0, done.stderr
    expected = float(sum(range(20)))
    for group in range(2):
        lanes = done.out[32 * group: 32 * group + 32]
        np.testing.assert_array_equal(lanes[:20], expected)
        assert np.isnan(lanes[20:]).all()  # returned lanes wrote nothing


def test_out_of_bounds_write_is_caught_by_asan_with_the_kernel_line(metal_emulator):
    done = metal_emulator.run_raw("selftest_out_of_bounds", threads=N, n_out=N)
    assert done.returncode not in (0, 3)
    assert "heap-buffer-overflow" in done.stderr
    assert "selftest_kernels.metal" in done.stderr


def test_unknown_kernel_is_an_error(metal_emulator):
    done = metal_emulator.run_raw("no_such_kernel", threads=32, n_out=32)
    assert done.returncode == 3
    assert "no kernel named no_such_kernel" in done.stderr
