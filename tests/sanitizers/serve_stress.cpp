// Stress driver for the concurrent core, run under ThreadSanitizer and
// AddressSanitizer/UBSan (see CMakeLists.txt). Each scenario drives one class
// from several threads with cancellations, timeouts, deadlines and injected
// failures, and checks its invariants; the sanitizers check the memory and
// synchronization underneath. Exit status 0 = every check held.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/cancel_token.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/thread_pool.h"
#include "engine/accelerator_scheduler.h"
#include "serve/admission_policy.h"
#include "serve/decode_batcher.h"
#include "serve/slot_admission.h"

namespace {

using namespace muser;
using namespace std::chrono_literals;

std::atomic<int> failures{0};

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "CHECK FAILED: %s\n", what.c_str());
    failures += 1;
  }
}

void run_threads(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back(body, i);
  for (auto& t : threads) t.join();
}

// The accelerator is held by one permit at a time; decodes and prefills interleave.
void scheduler_scenario() {
  AcceleratorScheduler scheduler;
  std::atomic<int> active{0};
  std::atomic<int> grants{0};
  run_threads(6, [&](int i) {
    for (int step = 0; step < 200; ++step) {
      Permit permit = i < 4 ? scheduler.acquire_decode(static_cast<uint64_t>(i))
                            : scheduler.acquire_prefill();
      check(active.fetch_add(1) == 0, "two permits held at once");
      if (i >= 4) scheduler.record_prefill_chunk(64, scheduler.has_waiting_decode());
      (void)scheduler.decode_activity();
      active.fetch_sub(1);
      grants += 1;
    }
  });
  check(grants == 1200, "every permit was granted");
  check(scheduler.stats().decode_grants == 800, "decode grants counted");
  // Poisoning wakes every waiter with Unhealthy instead of a hang.
  Permit holder = scheduler.acquire_prefill();
  std::atomic<int> unhealthy{0};
  std::thread poisoner([&] {
    std::this_thread::sleep_for(20ms);
    holder.poison("stress");
  });
  run_threads(3, [&](int i) {
    try {
      Permit p = scheduler.acquire_decode(100 + static_cast<uint64_t>(i));
    } catch (const Unhealthy&) {
      unhealthy += 1;
    }
  });
  poisoner.join();
  check(unhealthy == 3, "poisoning reached every waiter");
}

// No slot is ever held twice; cancellations, deadlines and timeouts leave the queue.
void admission_scenario() {
  SlotAdmission admission(2, 64);
  std::atomic<bool> held[2] = {false, false};
  std::atomic<int> admitted{0}, gave_up{0};
  run_threads(8, [&](int i) {
    std::mt19937 rng(static_cast<unsigned>(i));
    for (int round = 0; round < 150; ++round) {
      auto cancel = std::make_shared<CancelToken>();
      if (rng() % 4 == 0) cancel->set_deadline(std::chrono::steady_clock::now() + 200us);
      std::optional<std::chrono::nanoseconds> timeout;
      if (rng() % 3 == 0) timeout = 300us;
      const size_t prefix = rng() % 16;
      std::function<SlotAffinity(size_t)> affinity = [&](size_t slot) { return SlotAffinity{prefix + slot, 0}; };
      try {
        size_t slot = admission.acquire(timeout, cancel, affinity);
        check(!held[slot].exchange(true), "a slot was handed out twice");
        admitted += 1;
        if (rng() % 2) std::this_thread::sleep_for(50us);
        held[slot] = false;
        admission.release(slot);
      } catch (const Timeout&) {
        gave_up += 1;
      } catch (const Cancelled&) {
        gave_up += 1;
      }
    }
  });
  AdmissionStats stats = admission.stats();
  check(stats.waiting == 0 && stats.in_use == 0, "the queue and the slots are empty at the end");
  check(admitted + gave_up == 8 * 150, "every acquire ended");
  // The latch wakes every waiter.
  size_t a = admission.acquire(std::nullopt, nullptr, nullptr);
  size_t b = admission.acquire(std::nullopt, nullptr, nullptr);
  std::atomic<int> unhealthy{0};
  std::thread latch([&] {
    std::this_thread::sleep_for(20ms);
    admission.mark_unhealthy("stress");
  });
  run_threads(4, [&](int) {
    try {
      admission.acquire(std::nullopt, nullptr, nullptr);
    } catch (const Unhealthy&) {
      unhealthy += 1;
    }
  });
  latch.join();
  admission.release(a);
  admission.release(b);
  check(unhealthy == 4, "the latch reached every waiter");
}

// Every job ends exactly once: run, failed with its row, failed with its
// group, withdrawn by cancellation, or failed by a runner fault.
void batcher_scenario() {
  std::atomic<int> runs{0};
  DecodeBatcher* self = nullptr;
  DecodeBatcher batcher(
      [&](const std::vector<DecodeJob*>& group) {
        check(!group.empty() && group.size() <= 4, "group size within 1..4");
        std::set<uint64_t> slots;
        for (DecodeJob* job : group) {
          check(slots.insert(job->slot_id).second, "one row per slot in a group");
          if (job->token < 0) job->error = std::make_exception_ptr(InvalidArgument("bad row"));
        }
        runs += 1;
        if (runs % 97 == 0) throw InternalError("injected group failure");
      },
      200us, 4);
  self = &batcher;
  std::atomic<int> ok{0}, row_errors{0}, group_errors{0}, cancelled{0};
  for (int i = 0; i < 4; ++i) batcher.add_participant();
  run_threads(4, [&](int i) {
    std::mt19937 rng(static_cast<unsigned>(100 + i));
    for (int step = 0; step < 300; ++step) {
      if (i == 0 && step == 150) self->arm_bookkeeping_fault();
      DecodeJob job;
      job.slot_id = static_cast<uint64_t>(i);
      job.token = rng() % 23 == 0 ? -1 : 1;
      if (rng() % 19 == 0) {
        job.cancel = std::make_shared<CancelToken>();
        job.cancel->cancel();
      }
      try {
        batcher.submit(job);
        ok += 1;
      } catch (const InvalidArgument&) {
        row_errors += 1;
      } catch (const InternalError&) {
        group_errors += 1;
      } catch (const Cancelled&) {
        cancelled += 1;
      }
    }
    batcher.remove_participant();
  });
  check(ok + row_errors + group_errors + cancelled == 1200, "every job ended exactly once");
  check(group_errors > 0 && row_errors > 0 && cancelled > 0, "every failure path ran");
}

// One parallel_for at a time, from threads taking turns; a throwing task
// reaches the caller after the others finish.
void thread_pool_scenario() {
  ThreadPool pool(4);
  std::mutex turn;
  run_threads(3, [&](int i) {
    for (int round = 0; round < 50; ++round) {
      std::lock_guard<std::mutex> lock(turn);
      std::vector<int> out(64, 0);
      try {
        pool.parallel_for(out.size(), [&](size_t task, int) {
          if (round % 10 == 9 && task == 7) throw std::runtime_error("task failed");
          out[task] = static_cast<int>(task);
        });
        for (size_t t = 0; t < out.size(); ++t) check(out[t] == static_cast<int>(t), "every task ran");
      } catch (const std::runtime_error&) {
        check(round % 10 == 9, "only the failing rounds throw");
      }
    }
  });
}

// Tokens with parents and deadlines read consistently across threads; an
// interrupt scope affects only its own thread.
void cancel_and_interrupt_scenario() {
  auto parent = std::make_shared<CancelToken>();
  std::vector<std::shared_ptr<CancelToken>> children;
  for (int i = 0; i < 8; ++i) children.push_back(std::make_shared<CancelToken>(parent));
  std::atomic<int> seen{0};
  std::thread canceller([&] {
    std::this_thread::sleep_for(5ms);
    parent->cancel();
  });
  run_threads(8, [&](int i) {
    InterruptScope scope([i] {
      if (i == 3) throw Cancelled("interrupt");
    });
    while (!children[i]->cancelled()) std::this_thread::yield();
    seen += 1;
    try {
      check_interrupt();
      check(i != 3, "thread 3's scope throws");
    } catch (const Cancelled&) {
      check(i == 3, "only thread 3's scope throws");
    }
  });
  canceller.join();
  check(seen == 8 && !interrupt_check_installed(), "every child saw its parent; scopes are gone");
  auto timed = std::make_shared<CancelToken>();
  timed->set_deadline(std::chrono::steady_clock::now() + 1ms);
  std::this_thread::sleep_for(3ms);
  check(timed->cancelled() && timed->deadline_passed(), "a deadline reads as cancelled once passed");
}

}  // namespace

int main() {
  scheduler_scenario();
  admission_scenario();
  batcher_scenario();
  thread_pool_scenario();
  cancel_and_interrupt_scenario();
  if (failures != 0) {
    std::fprintf(stderr, "%d checks failed\n", failures.load());
    return 1;
  }
  std::printf("serve_stress: all checks held\n");
  return 0;
}
