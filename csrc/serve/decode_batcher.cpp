#include "serve/decode_batcher.h"

#include <algorithm>

#include "core/error.h"

namespace muser {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t ns_since(Clock::time_point since) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - since).count());
}

}  // namespace

DecodeBatcher::DecodeBatcher(RunGroup run_group, std::chrono::microseconds window, size_t max_rows)
    : run_group_(std::move(run_group)), window_(window), max_rows_(max_rows) {
  if (max_rows_ < 1 || max_rows_ > 4) {
    throw InvalidArgument("[decode_batcher] max_rows must be 1..4, got " + std::to_string(max_rows_));
  }
  if (window_.count() < 0) throw InvalidArgument("[decode_batcher] the window must not be negative");
  stats_.group_size_counts.assign(max_rows_ + 1, 0);
}

void DecodeBatcher::add_participant() {
  std::lock_guard<std::mutex> lock(mutex_);
  participants_ += 1;
}

void DecodeBatcher::remove_participant() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (participants_ > 0) participants_ -= 1;
  }
  changed_.notify_all();  // a runner waiting for this stream's row need not wait
}

void DecodeBatcher::notify_cancelled() { changed_.notify_all(); }

bool DecodeBatcher::withdraw_if_cancelled_locked(DecodeJob& job) {
  if (job.taken || !job.cancel || !job.cancel->cancelled()) return false;
  auto it = std::find(queue_.begin(), queue_.end(), &job);
  if (it != queue_.end()) queue_.erase(it);
  stats_.cancelled_in_queue += 1;
  return true;
}

std::vector<DecodeJob*> DecodeBatcher::take_group_locked() {
  // Withdraw cancelled jobs on their owners' behalf so they never ride along.
  for (auto it = queue_.begin(); it != queue_.end();) {
    DecodeJob* job = *it;
    if (job->cancel && job->cancel->cancelled()) {
      job->done = true;
      job->error = std::make_exception_ptr(Cancelled("[decode_batcher] the request was cancelled"));
      stats_.cancelled_in_queue += 1;
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  // Cyclic rotation: slots after the last one served first, then wrap.
  std::vector<DecodeJob*> order(queue_.begin(), queue_.end());
  const std::optional<uint64_t> cursor = last_slot_;
  std::stable_sort(order.begin(), order.end(), [&](const DecodeJob* a, const DecodeJob* b) {
    bool a_wraps = cursor && a->slot_id <= *cursor;
    bool b_wraps = cursor && b->slot_id <= *cursor;
    if (a_wraps != b_wraps) return !a_wraps;
    return a->slot_id < b->slot_id;
  });
  if (order.size() > max_rows_) order.resize(max_rows_);
  for (DecodeJob* job : order) {
    job->taken = true;
    queue_.erase(std::find(queue_.begin(), queue_.end(), job));
    uint64_t waited = ns_since(job->submitted_at);
    stats_.queue_wait_ns += waited;
    stats_.max_queue_wait_ns = std::max(stats_.max_queue_wait_ns, waited);
  }
  if (!order.empty()) last_slot_ = order.back()->slot_id;
  return order;
}

void DecodeBatcher::fail_everyone_locked(const std::vector<DecodeJob*>& group, const std::exception_ptr& error) {
  for (DecodeJob* member : group) {
    member->done = true;
    member->error = error;
  }
  for (DecodeJob* queued : queue_) {
    queued->done = true;
    queued->error = error;
  }
  queue_.clear();
}

void DecodeBatcher::run_as_runner_locked(std::unique_lock<std::mutex>& lock) {
  runner_active_ = true;
  std::vector<DecodeJob*> group;
  try {
    const auto allowance = std::min<std::chrono::nanoseconds>(
        kMaxThinkAllowance, std::chrono::nanoseconds(static_cast<int64_t>(think_ns_)));
    const auto deadline = Clock::now() + window_ + allowance;
    auto enough_rows = [&] {
      size_t could_join = std::min(max_rows_, std::max<size_t>(participants_, 1));
      return queue_.size() >= could_join;
    };
    while (window_.count() > 0 && !enough_rows() && Clock::now() < deadline) {
      changed_.wait_until(lock, deadline);
    }
    if (bookkeeping_fault_armed_) {
      bookkeeping_fault_armed_ = false;
      throw InternalError("[decode_batcher] injected bookkeeping fault (tests)");
    }
    group = take_group_locked();
    if (!group.empty()) {
      lock.unlock();
      std::exception_ptr error;
      try {
        run_group_(group);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      const auto finished = Clock::now();
      for (DecodeJob* member : group) {
        member->done = true;
        if (error) member->error = error;  // else keep a row's own error, if any
        finished_at_[member->slot_id] = finished;
      }
      stats_.groups += 1;
      stats_.rows += group.size();
      stats_.group_size_counts[group.size()] += 1;
      if (error) stats_.failed_groups += 1;
    }
  } catch (const std::exception& e) {
    // The runner's own state is in doubt (the group's run never throws here):
    // fail every job rather than leave owners waiting for a runner that
    // will not come.
    if (!lock.owns_lock()) lock.lock();
    fail_everyone_locked(group, std::make_exception_ptr(InternalError(
                                    std::string("[decode_batcher] the group runner failed: ") + e.what())));
  } catch (...) {
    if (!lock.owns_lock()) lock.lock();
    fail_everyone_locked(group, std::make_exception_ptr(InternalError("[decode_batcher] the group runner failed")));
  }
  runner_active_ = false;
  changed_.notify_all();
}

void DecodeBatcher::arm_bookkeeping_fault() {
  std::lock_guard<std::mutex> lock(mutex_);
  bookkeeping_fault_armed_ = true;
}

void DecodeBatcher::submit(DecodeJob& job) {
  std::unique_lock<std::mutex> lock(mutex_);
  job.submitted_at = Clock::now();
  if (auto it = finished_at_.find(job.slot_id); it != finished_at_.end()) {
    // A stream's think time: from its previous step finishing to this submit.
    const double think = static_cast<double>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(job.submitted_at - it->second).count());
    think_ns_ = think_ns_ == 0.0 ? think : 0.8 * think_ns_ + 0.2 * think;
  }
  job.taken = false;
  job.done = false;
  job.error = nullptr;
  queue_.push_back(&job);
  changed_.notify_all();  // a runner in its window may now have enough rows

  while (!job.done) {
    if (withdraw_if_cancelled_locked(job)) {
      throw Cancelled("[decode_batcher] the request was cancelled");
    }
    if (!runner_active_) {
      run_as_runner_locked(lock);
    } else if (job.cancel) {
      changed_.wait_for(lock, kCancelPollInterval);
    } else {
      changed_.wait(lock);
    }
  }
  if (job.error) std::rethrow_exception(job.error);
}

BatcherStats DecodeBatcher::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  BatcherStats out = stats_;
  out.think_time_ns = static_cast<uint64_t>(think_ns_);
  return out;
}

}  // namespace muser
