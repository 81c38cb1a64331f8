#include "serve/slot_admission.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/interrupt.h"
#include "serve/admission_policy.h"

namespace muser {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

SlotAdmission::SlotAdmission(size_t n_slots, size_t max_waiting) : max_waiting_(max_waiting) {
  if (n_slots < 1 || n_slots > kMaxSlots) {
    throw InvalidArgument("[slot_pool] slots must be 1.." + std::to_string(kMaxSlots) + ", got " +
                          std::to_string(n_slots));
  }
  in_use_.assign(n_slots, false);
}

void SlotAdmission::throw_if_unhealthy_locked() const {
  if (unhealthy_) throw Unhealthy("[slot_pool] the pool is unhealthy: " + unhealthy_reason_);
}

std::optional<size_t> SlotAdmission::best_free_slot_locked(
    const std::function<SlotAffinity(size_t)>& affinity) const {
  std::optional<size_t> best;
  SlotAffinity best_affinity;
  for (size_t slot = 0; slot < in_use_.size(); ++slot) {
    if (in_use_[slot]) continue;
    SlotAffinity a = affinity ? affinity(slot) : SlotAffinity{};
    bool better = !best || a.shared_prefix > best_affinity.shared_prefix ||
                  (a.shared_prefix == best_affinity.shared_prefix && a.history < best_affinity.history);
    if (better) {
      best = slot;
      best_affinity = a;
    }
  }
  return best;
}

uint64_t SlotAdmission::chosen_ticket_locked() {
  const bool scored = waiters_.size() <= kFcfsAboveWaiters;
  std::vector<WaiterView> views;
  std::vector<uint64_t> tickets;
  views.reserve(waiters_.size());
  tickets.reserve(waiters_.size());
  for (auto& [ticket, waiter] : waiters_) {
    if (scored && waiter.scored_at != free_version_) {
      waiter.cached_prefix = 0;
      if (waiter.affinity != nullptr && *waiter.affinity) {
        for (size_t slot = 0; slot < in_use_.size(); ++slot) {
          if (!in_use_[slot]) waiter.cached_prefix = std::max(waiter.cached_prefix, (*waiter.affinity)(slot).shared_prefix);
        }
      }
      waiter.scored_at = free_version_;
    }
    views.push_back(WaiterView{scored ? waiter.cached_prefix : 0, waiter.passed_over});
    tickets.push_back(ticket);
  }
  return tickets[next_waiter(views)];
}

void SlotAdmission::record_locked(ScheduleEventKind kind, uint64_t ticket, int64_t slot, const char* what) const {
  if (recorder_ == nullptr || !recorder_->on()) return;
  ScheduleEvent event;
  event.kind = kind;
  event.subject = ticket;
  event.pool = pool_id_;
  event.slot = slot;
  event.what = what;
  recorder_->record(std::move(event));
  if (kind == ScheduleEventKind::AdmissionRefused && std::string(what) == "cancelled") {
    recorder_->record_cancelled(pool_id_, -1, 0, "admission");
  }
}

size_t SlotAdmission::acquire(std::optional<std::chrono::nanoseconds> timeout, const CancelTokenPtr& cancel,
                              const std::function<SlotAffinity(size_t)>& affinity) {
  const auto started = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  if (unhealthy_) record_locked(ScheduleEventKind::AdmissionRefused, 0, -1, "unhealthy");
  throw_if_unhealthy_locked();
  if (waiters_.size() >= max_waiting_ && !(waiters_.empty() && best_free_slot_locked(nullptr))) {
    record_locked(ScheduleEventKind::AdmissionRefused, 0, -1, "overloaded");
    stats_.rejections += 1;
    throw Overloaded("[slot_pool] " + std::to_string(waiters_.size()) +
                     " callers are already waiting (max_waiting=" + std::to_string(max_waiting_) + ")");
  }
  const uint64_t ticket = next_ticket_++;
  waiters_[ticket].affinity = &affinity;
  // Recorded tickets count from 1: 0 means "never queued".
  record_locked(ScheduleEventKind::AdmissionRequested, ticket + 1, -1, "");
  auto leave = [&] {
    waiters_.erase(ticket);
    changed_.notify_all();  // another waiter may now be the chosen one
  };
  std::optional<Clock::time_point> deadline;
  if (timeout) deadline = started + std::chrono::duration_cast<Clock::duration>(*timeout);

  while (true) {
    if (unhealthy_) {
      leave();
      record_locked(ScheduleEventKind::AdmissionRefused, ticket + 1, -1, "unhealthy");
      throw_if_unhealthy_locked();
    }
    if (cancel && cancel->cancelled()) {
      stats_.cancellations += 1;
      leave();
      record_locked(ScheduleEventKind::AdmissionRefused, ticket + 1, -1, "cancelled");
      throw Cancelled("[slot_pool] cancelled while waiting for a slot");
    }
    if (best_free_slot_locked(nullptr) && chosen_ticket_locked() == ticket) {
      const size_t slot = *best_free_slot_locked(affinity);
      in_use_[slot] = true;
      free_version_ += 1;
      // Everyone who came earlier and still waits was passed over once more.
      for (auto& [other, waiter] : waiters_) {
        if (other >= ticket) break;
        waiter.passed_over += 1;
      }
      leave();
      record_locked(ScheduleEventKind::Admitted, ticket + 1, static_cast<int64_t>(slot), "");
      stats_.admissions += 1;
      stats_.admission_wait_ns += static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - started).count());
      return slot;
    }
    if (deadline && Clock::now() >= *deadline) {
      stats_.timeouts += 1;
      leave();
      record_locked(ScheduleEventKind::AdmissionRefused, ticket + 1, -1, "timeout");
      throw Timeout("[slot_pool] no slot became free within the timeout");
    }
    auto wake_by = Clock::time_point::max();
    if (deadline) wake_by = *deadline;
    if (cancel) wake_by = std::min(wake_by, Clock::now() + kCancelPollInterval);
    if (interrupt_check_installed()) wake_by = std::min(wake_by, Clock::now() + kInterruptPollInterval);
    if (wake_by == Clock::time_point::max()) {
      changed_.wait(lock);
    } else {
      changed_.wait_until(lock, wake_by);
    }
    if (interrupt_check_installed()) {
      // The check takes the GIL: never while holding our lock, which threads
      // holding the GIL may be waiting for.
      lock.unlock();
      try {
        check_interrupt();
      } catch (...) {
        lock.lock();
        leave();
        throw;
      }
      lock.lock();
    }
  }
}

void SlotAdmission::release(size_t slot) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (slot >= in_use_.size() || !in_use_[slot]) {
      throw InternalError("[slot_pool] release of slot " + std::to_string(slot) + " that is not held");
    }
    in_use_[slot] = false;
    free_version_ += 1;
  }
  changed_.notify_all();
}

void SlotAdmission::mark_unhealthy(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!unhealthy_) {
      unhealthy_ = true;
      unhealthy_reason_ = reason;
    }
  }
  changed_.notify_all();
}

bool SlotAdmission::healthy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !unhealthy_;
}

size_t SlotAdmission::waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return waiters_.size();
}

std::string SlotAdmission::unhealthy_reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return unhealthy_reason_;
}

AdmissionStats SlotAdmission::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  AdmissionStats out = stats_;
  out.waiting = waiters_.size();
  out.in_use = 0;
  for (bool used : in_use_) out.in_use += used ? 1 : 0;
  return out;
}

}  // namespace muser
