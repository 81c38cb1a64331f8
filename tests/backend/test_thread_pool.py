"""muser::ThreadPool: every task runs exactly once, errors propagate after
the other tasks finish, and a pool of one runs inline on the caller."""

import pytest

from muser._core import _testing as t


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
@pytest.mark.parametrize("n_tasks", [0, 1, 2, 7, 1000])
def test_every_task_runs_exactly_once(threads, n_tasks):
    pool = t.ThreadPoolProbe(threads)
    assert pool.run_counts(n_tasks) == [1] * n_tasks


def test_a_pool_is_reusable_for_many_jobs_in_a_row():
    pool = t.ThreadPoolProbe(3)
    for n_tasks in list(range(20)) * 20:
        assert pool.run_counts(n_tasks) == [1] * n_tasks


def test_a_pool_of_one_runs_every_task_inline_on_the_calling_thread():
    pool = t.ThreadPoolProbe(1)
    assert pool.run_placement(5) == [(True, 0)] * 5


def test_thread_indices_are_within_the_pool_size():
    pool = t.ThreadPoolProbe(4)
    placements = pool.run_placement(200)
    assert all(0 <= thread < 4 for _, thread in placements)
    # index 0 is the caller itself
    assert all(on_caller == (thread == 0) for on_caller, thread in placements)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_a_failing_task_raises_in_the_caller_after_all_tasks_ran(threads):
    pool = t.ThreadPoolProbe(threads)
    with pytest.raises(ValueError, match="task 5 failed"):
        pool.run_failing(64, [40, 5, 63])  # the lowest failing index wins
    assert pool.last_counts == [1] * 64
    # and the pool still works afterwards
    assert pool.run_counts(10) == [1] * 10


def test_a_pool_needs_at_least_one_thread():
    with pytest.raises(ValueError, match="n_threads must be >= 1"):
        t.ThreadPoolProbe(0)


def test_physical_core_count_is_positive():
    assert t.physical_core_count() >= 1


def test_late_waking_workers_never_run_a_task_twice_or_skip_one():
    # More threads than cores: workers often wake after their job is done or
    # while the next one is being published; the claim protocol must keep
    # every task of every job at exactly one run.
    pool = t.ThreadPoolProbe(8)
    for n_tasks in [2, 3, 5, 9, 17] * 400:
        assert pool.run_counts(n_tasks) == [1] * n_tasks


def _cpu_seconds_while_sleeping(seconds: float) -> float:
    import time

    started = time.process_time()
    time.sleep(seconds)
    return time.process_time() - started


def test_an_idle_pool_stops_polling_after_a_burst_of_jobs():
    # Workers poll briefly after each job (thread_pool.cpp, kSpinBudget);
    # once no job comes they must sleep: a pool left idle uses no CPU,
    # however many jobs just ran. Process CPU time, so a busy machine does
    # not make this flaky; the bound is far above any bounded poll.
    pool = t.ThreadPoolProbe(4)
    for _ in range(2000):
        pool.run_counts(8)
    assert _cpu_seconds_while_sleeping(0.4) < 0.05
    # and it still runs jobs afterwards
    assert pool.run_counts(10) == [1] * 10
