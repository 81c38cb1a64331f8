// Serving-layer building blocks: cancellation tokens, slot admission and the
// decode batcher. muser.SlotPool composes them with an Engine; they are also
// bound on their own so property tests drive the real code from threads.
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <stdexcept>

#include "bindings/bindings.h"
#include "bindings/blocking_call.h"
#include "core/error.h"
#include "serve/admission_policy.h"
#include "serve/decode_batcher.h"
#include "serve/slot_admission.h"
#include "serve/slot_pool.h"

namespace nb = nanobind;

#include "core/limits.h"

namespace muser::bindings {
namespace {

// Timeouts at or above this (about 31 years) wait without limit: int64
// nanoseconds overflow near 292 years, and converting an out-of-range double
// to an integer is undefined behaviour (it made `inf` time out at once).
constexpr double kUnboundedTimeoutSeconds = 1e9;

std::optional<std::chrono::nanoseconds> to_timeout(std::optional<double> seconds) {
  if (!seconds) return std::nullopt;
  if (std::isnan(*seconds) || *seconds < 0) {
    throw InvalidArgument("[slot_pool] timeout must be >= 0 seconds or None, got " + std::to_string(*seconds));
  }
  if (*seconds >= kUnboundedTimeoutSeconds) return std::nullopt;
  return std::chrono::nanoseconds(static_cast<int64_t>(*seconds * 1e9));
}

nb::dict batcher_stats_dict(const BatcherStats& st) {
  nb::dict d;
  d["groups"] = st.groups;
  d["rows"] = st.rows;
  d["group_size_counts"] = st.group_size_counts;
  d["queue_wait_ns"] = st.queue_wait_ns;
  d["max_queue_wait_ns"] = st.max_queue_wait_ns;
  d["cancelled_in_queue"] = st.cancelled_in_queue;
  d["failed_groups"] = st.failed_groups;
  d["think_time_ns"] = st.think_time_ns;
  return d;
}

nb::dict admission_stats_dict(const AdmissionStats& st) {
  nb::dict d;
  d["admissions"] = st.admissions;
  d["rejections"] = st.rejections;
  d["timeouts"] = st.timeouts;
  d["cancellations"] = st.cancellations;
  d["admission_wait_ns"] = st.admission_wait_ns;
  d["waiting"] = st.waiting;
  d["in_use"] = st.in_use;
  return d;
}

}  // namespace


void init_serve(nb::module_& m) {
  nb::class_<CancelToken>(m, "CancelToken",
                          "A sticky, thread-safe cancellation flag shared by a request and what it waits on.\n"
                          "With a parent it also reads as cancelled once the parent is; with a deadline,\n"
                          "once the deadline has passed.")
      .def(
          "__init__",
          [](CancelToken* self, std::shared_ptr<CancelToken> parent) {
            new (self) CancelToken(std::shared_ptr<const CancelToken>(std::move(parent)));
          },
          nb::arg("parent").none() = nb::none())
      .def("cancel", &CancelToken::cancel)
      .def(
          "set_deadline",
          [](CancelToken& t, double seconds) {
            if (!(seconds >= 0)) throw InvalidArgument("[cancel_token] deadline: expected seconds >= 0");
            t.set_deadline(std::chrono::steady_clock::now() +
                           std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double>(seconds)));
          },
          nb::arg("seconds"), "Reads as cancelled `seconds` from now on.")
      .def_prop_ro("cancelled", &CancelToken::cancelled)
      .def_prop_ro("deadline_passed", &CancelToken::deadline_passed);

  m.attr("ADMISSION_FCFS_ABOVE_WAITERS") = kFcfsAboveWaiters;
  m.attr("ADMISSION_MAX_PASSED_OVER") = kMaxPassedOver;
  m.def(
      "next_waiter",
      [](const std::vector<std::pair<size_t, uint32_t>>& waiters) {
        if (waiters.empty()) throw InvalidArgument("[admission] next_waiter: expected at least one waiter");
        std::vector<WaiterView> views;
        for (const auto& [prefix, passed] : waiters) views.push_back(WaiterView{prefix, passed});
        return next_waiter(views);
      },
      nb::arg("waiters"),
      "The admission rule: index of the waiter admitted next, given (cached_prefix, passed_over)\n"
      "per waiter in arrival order.");

  nb::class_<SlotAdmission>(m, "SlotAdmission",
                            "First-come-first-served admission to 1..4 slots with a bounded queue.\n"
                            "Thread-safe; acquire() blocks with the GIL released.")
      .def(nb::init<size_t, size_t>(), nb::arg("slots"), nb::arg("max_waiting"))
      .def(
          "acquire",
          [](SlotAdmission& a, std::optional<double> timeout, std::shared_ptr<CancelToken> cancel,
             std::optional<std::vector<size_t>> prefix_lengths) {
            auto bound = to_timeout(timeout);
            std::vector<size_t> lengths = prefix_lengths.value_or(std::vector<size_t>{});
            PythonSignals signals;
            ReleasedGil release;
            return a.acquire(bound, cancel, [&](size_t slot) {
              return SlotAffinity{slot < lengths.size() ? lengths[slot] : 0, 0};
            });
          },
          nb::arg("timeout").none() = nb::none(), nb::arg("cancel").none() = nb::none(),
          nb::arg("prefix_lengths").none() = nb::none(),
          "Returns a slot index. Raises Overloaded, TimeoutError, Cancelled or Unhealthy.")
      .def("release", &SlotAdmission::release, nb::arg("slot"))
      .def("mark_unhealthy", &SlotAdmission::mark_unhealthy, nb::arg("reason"))
      .def_prop_ro("healthy", &SlotAdmission::healthy)
      .def_prop_ro("waiting", &SlotAdmission::waiting)
      .def_prop_ro("slots", &SlotAdmission::n_slots)
      .def_prop_ro("max_waiting", &SlotAdmission::max_waiting)
      .def("stats", [](const SlotAdmission& a) { return admission_stats_dict(a.stats()); });

  nb::class_<SlotPool>(m, "SlotPool",
                       "1..4 resident sessions of one engine with admission, prefix reuse, decode\n"
                       "batching and context shift. Thread-safe; blocking calls release the GIL.")
      .def(
          "__init__",
          [](SlotPool* self, std::shared_ptr<Engine> engine, size_t slots, size_t max_waiting, size_t max_context,
             double window_us) {
            // Also refuses NaN; a window past a second is a mistake, and
            // casting a huge double to int64 microseconds would be undefined.
            if (!(window_us >= 0 && window_us <= 1e6)) {
              throw InvalidArgument("[slot_pool] batch_window_us must be in [0, 1e6] microseconds, got " +
                                    std::to_string(window_us));
            }
            nb::gil_scoped_release release;
            new (self) SlotPool(std::move(engine), slots, max_waiting, max_context,
                                std::chrono::microseconds(static_cast<int64_t>(window_us)));
          },
          nb::arg("engine"), nb::arg("slots"), nb::arg("max_waiting"), nb::arg("max_context"),
          nb::arg("batch_window_us") = kDefaultBatchWindowUs)
      .def(
          "acquire",
          [](SlotPool& p, const std::vector<int32_t>& prompt, std::optional<double> timeout,
             std::shared_ptr<CancelToken> cancel) {
            auto bound = to_timeout(timeout);
            PythonSignals signals;
            ReleasedGil release;
            SlotLease lease = p.acquire(prompt, bound, cancel);
            return std::make_pair(lease.slot, lease.reused_tokens);
          },
          nb::arg("prompt"), nb::arg("timeout").none() = nb::none(), nb::arg("cancel").none() = nb::none(),
          "Admit the caller: (slot, reused_prompt_tokens). Raises Overloaded, TimeoutError, Cancelled, Unhealthy.")
      .def(
          "release",
          [](SlotPool& p, size_t slot, bool healthy) {
            nb::gil_scoped_release release;
            p.release(slot, healthy);
          },
          nb::arg("slot"), nb::arg("healthy") = true)
      .def(
          "session",
          [](const SlotPool& p, size_t slot) {
            nb::gil_scoped_release release;
            return p.session(slot);
          },
          nb::arg("slot"), "The session now serving `slot`.")
      .def(
          "prefill",
          [](SlotPool& p, size_t slot, const std::vector<int64_t>& tokens, std::shared_ptr<CancelToken> cancel) {
            const uint32_t n_vocab = p.engine()->hparams().n_vocab;
            std::vector<int32_t> ids(tokens.size());
            for (size_t i = 0; i < tokens.size(); ++i) {
              // Checked before narrowing so a huge id fails like any other bad id.
              if (tokens[i] < 0 || tokens[i] >= static_cast<int64_t>(n_vocab)) {
                throw InvalidArgument("[session] prefill: token id " + std::to_string(tokens[i]) + " at index " +
                                      std::to_string(i) + " out of range [0, " + std::to_string(n_vocab) + ")");
              }
              ids[i] = static_cast<int32_t>(tokens[i]);
            }
            PythonSignals signals;
            ReleasedGil release;
            p.prefill(slot, ids, cancel.get());
          },
          nb::arg("slot"), nb::arg("tokens"), nb::arg("cancel").none() = nb::none(),
          "Append tokens to the slot's session (chunked; Ctrl-C and `cancel` stop it at a chunk boundary,\n"
          "state unchanged). Raises Unhealthy once the pool latched.")
      .def(
          "decode",
          [](SlotPool& p, size_t slot, int64_t token, std::shared_ptr<CancelToken> cancel) {
            if (token < INT32_MIN || token > INT32_MAX) {
              throw InvalidArgument("[session] decode: token id " + std::to_string(token) + " out of range");
            }
            ReleasedGil release;
            p.decode(slot, static_cast<int32_t>(token), cancel);
          },
          nb::arg("slot"), nb::arg("token"), nb::arg("cancel").none() = nb::none(),
          "One decode step of `slot`, packed with concurrent steps of other slots.")
      .def(
          "context_shift",
          [](SlotPool& p, size_t slot, size_t n_keep, std::shared_ptr<CancelToken> cancel) {
            PythonSignals signals;
            ReleasedGil release;
            return p.context_shift(slot, n_keep, cancel.get());
          },
          nb::arg("slot"), nb::arg("n_keep"), nb::arg("cancel").none() = nb::none(),
          "Keep n_keep tokens and the newest half of the rest, rebuilt aside then swapped in; returns n_past.")
      .def("mark_unhealthy", &SlotPool::mark_unhealthy, nb::arg("reason"))
      .def_prop_ro("healthy", &SlotPool::healthy)
      .def_prop_ro("unhealthy_reason", &SlotPool::unhealthy_reason, "Why the pool latched ('' while healthy).")
      .def_prop_ro("waiting", &SlotPool::waiting, "Callers waiting for a slot now.")
      .def_prop_ro("slots", &SlotPool::n_slots)
      .def_prop_ro("max_context", &SlotPool::max_context)
      .def("_arm_batcher_fault", &SlotPool::arm_batcher_fault,
           "Tests only: the decode batcher's next bookkeeping step fails.")
      .def_prop_ro("id", &SlotPool::id, "Process-unique pool id (labels its events in schedule recordings).")
      .def("stats", [](const SlotPool& p) {
        PoolStats st;
        {
          nb::gil_scoped_release release;
          st = p.stats();
        }
        nb::dict d;
        d["admission"] = admission_stats_dict(st.admission);
        d["batcher"] = batcher_stats_dict(st.batcher);
        d["reused_prefix_tokens"] = st.reused_prefix_tokens;
        d["prefix_hits"] = st.prefix_hits;
        d["prefix_misses"] = st.prefix_misses;
        d["context_shifts"] = st.context_shifts;
        d["kv_bytes"] = st.kv_bytes;
        return d;
      });

  nb::class_<DecodeBatcher>(m, "DecodeBatcher",
                            "Coalesces concurrent decode steps into groups of up to max_rows rows.\n"
                            "run_group(rows) receives [(slot_id, token), ...] in rotation order;\n"
                            "its exception reaches every owner of that group.")
      .def(
          "__init__",
          [](DecodeBatcher* self, nb::callable run_group, double window_us, size_t max_rows) {
            auto runner = [run_group](const std::vector<DecodeJob*>& group) {
              nb::gil_scoped_acquire gil;
              nb::list rows;
              for (const DecodeJob* job : group) rows.append(nb::make_tuple(job->slot_id, job->token));
              try {
                run_group(rows);
              } catch (nb::python_error& e) {
                // One error reaches several owners on several threads, but a
                // python_error may be restored only once: pass its text on.
                throw std::runtime_error(e.what());
              }
            };
            new (self) DecodeBatcher(runner, std::chrono::microseconds(static_cast<int64_t>(window_us)), max_rows);
          },
          nb::arg("run_group"), nb::arg("window_us") = kDefaultBatchWindowUs, nb::arg("max_rows") = kMaxDecodeGroupRows)
      .def(
          "submit",
          [](DecodeBatcher& b, uint64_t slot_id, int32_t token, std::shared_ptr<CancelToken> cancel) {
            DecodeJob job;
            job.slot_id = slot_id;
            job.token = token;
            job.cancel = std::move(cancel);
            ReleasedGil release;
            b.submit(job);
          },
          nb::arg("slot_id"), nb::arg("token"), nb::arg("cancel").none() = nb::none(),
          "Blocks until this row ran in some group; rethrows that group's error.")
      .def("add_participant", &DecodeBatcher::add_participant)
      .def("remove_participant", &DecodeBatcher::remove_participant)
      .def("notify_cancelled", &DecodeBatcher::notify_cancelled)
      .def("_arm_bookkeeping_fault", &DecodeBatcher::arm_bookkeeping_fault,
           "Tests only: the runner's next bookkeeping step fails.")
      .def_prop_ro("window_us", [](const DecodeBatcher& b) { return static_cast<double>(b.window().count()); })
      .def_prop_ro("max_rows", &DecodeBatcher::max_rows)
      .def("stats", [](const DecodeBatcher& b) { return batcher_stats_dict(b.stats()); });
}

}  // namespace muser::bindings
