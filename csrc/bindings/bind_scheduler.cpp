// The AcceleratorScheduler, exposed so property tests drive the real code
// from Python threads. Engines own their scheduler; this standalone binding
// is for tests and for tools that want to reason about the rotation.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/set.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings/bindings.h"
#include "bindings/python_values.h"
#include "core/error.h"
#include "engine/accelerator_scheduler.h"

namespace nb = nanobind;

#include "core/limits.h"

namespace muser::bindings {

void init_scheduler(nb::module_& m) {
  m.attr("PREFILL_CHUNK_ROWS") = kPrefillChunkRows;
  m.attr("PREFILL_CHUNK_ROWS_CONTENDED") = kPrefillChunkRowsContended;
  m.attr("MAX_DECODE_GROUP_ROWS") = kMaxDecodeGroupRows;
  // The rest of core/limits.h, for the Python layer's defaults.
  m.attr("MAX_STEP_ROWS") = kMaxStepRows;
  m.attr("MAX_SLOTS") = kMaxSlots;
  m.attr("DEFAULT_MAX_WAITING") = kDefaultMaxWaiting;
  m.attr("DEFAULT_MAX_CONTEXT") = kDefaultMaxContext;
  m.attr("DEFAULT_BATCH_WINDOW_US") = kDefaultBatchWindowUs;

  nb::class_<Permit>(m, "Permit",
                     "Ownership of the accelerator. Release by leaving its `with` block or calling release().")
      .def_prop_ro("held", &Permit::held)
      .def_prop_ro("kind", [](const Permit& p) { return p.kind() == WorkKind::Decode ? "decode" : "prefill"; })
      .def("release", &Permit::release)
      .def("poison", &Permit::poison, nb::arg("reason"),
           "Mark the accelerator unhealthy and release; every later acquire raises Unhealthy.")
      .def("__enter__", [](Permit& p) -> Permit& { return p; }, nb::rv_policy::reference)
      .def("__exit__", [](Permit& p, nb::handle, nb::handle, nb::handle) { p.release(); },
           nb::arg().none(), nb::arg().none(), nb::arg().none());

  nb::class_<AcceleratorScheduler>(m, "AcceleratorScheduler",
                                   "One owner of one accelerator: decode rotation and prefill priority.\n"
                                   "Thread-safe; acquire_* block with the GIL released.")
      .def(nb::init<>())
      .def(
          "acquire_decode",
          [](AcceleratorScheduler& s, uint64_t sequence_id) {
            nb::gil_scoped_release release;
            return s.acquire_decode(sequence_id);
          },
          nb::arg("sequence_id"), nb::keep_alive<0, 1>())
      .def(
          "acquire_decode_group",
          [](AcceleratorScheduler& s, const std::vector<uint64_t>& ids) {
            std::set<uint64_t> unique(ids.begin(), ids.end());
            if (unique.size() != ids.size()) throw InvalidArgument("[scheduler] a decode group repeats a sequence");
            nb::gil_scoped_release release;
            return s.acquire_decode_group(unique);
          },
          nb::arg("sequence_ids"), nb::keep_alive<0, 1>())
      .def(
          "acquire_prefill",
          [](AcceleratorScheduler& s) {
            nb::gil_scoped_release release;
            return s.acquire_prefill();
          },
          nb::keep_alive<0, 1>())
      .def("has_waiting_decode", &AcceleratorScheduler::has_waiting_decode)
      .def_prop_ro("poisoned", &AcceleratorScheduler::poisoned)
      .def_prop_ro("poison_reason", &AcceleratorScheduler::poison_reason)
      .def("waiting_decode",
           [](const AcceleratorScheduler& s) {
             SchedulerState st = s.snapshot_state();
             return std::vector<uint64_t>(st.waiting_decode.begin(), st.waiting_decode.end());
           })
      .def("stats",
           [](const AcceleratorScheduler& s) { return scheduler_stats_dict(s.stats()); })
      .def_static(
          "select_next_decode",
          [](const std::vector<uint64_t>& waiting, std::optional<uint64_t> last_decode) {
            SchedulerState st;
            st.waiting_decode.insert(waiting.begin(), waiting.end());
            st.last_decode = last_decode;
            return next_decode(st);
          },
          nb::arg("waiting"), nb::arg("last_decode").none(),
          "The pure rotation rule: which waiting sequence decodes next.")
      .def_static("prefill_chunk_rows", &prefill_chunk_rows, nb::arg("decode_waiting"), nb::arg("remaining_rows"),
                  "The pure chunking rule: rows in the next prefill chunk.");
}

}  // namespace muser::bindings
