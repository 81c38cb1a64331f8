// The ScheduleRecorder of an engine (`Engine.schedule_recorder`), for
// muser.testing's `engine.record_schedule()`. Events cross as plain tuples;
// muser/testing/schedule_log.py gives them names and types.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings/bindings.h"
#include "engine/schedule_recorder.h"

namespace nb = nanobind;

namespace muser::bindings {
namespace {

nb::list events_list(const std::vector<ScheduleEvent>& events) {
  nb::list out;
  for (const ScheduleEvent& e : events) {
    out.append(nb::make_tuple(e.seq, e.time_ns, schedule_event_kind_name(e.kind), e.subject, e.pool, e.slot,
                              e.rows, e.sessions, e.slots, e.what, e.detail));
  }
  return out;
}

}  // namespace

void init_schedule(nb::module_& m) {
  nb::class_<ScheduleRecorder>(
      m, "ScheduleRecorder",
      "An engine's scheduling event log (permits, admissions, decode groups, cancellations, notes).\n"
      "Events are tuples (seq, time_ns, kind, subject, pool, slot, rows, sessions, slots, what, detail).\n"
      "Thread-safe; cheap when not recording.")
      .def("start", &ScheduleRecorder::start, "Clear and start recording; ValueError if already recording.")
      .def("stop", [](ScheduleRecorder& r) { return events_list(r.stop()); },
           "Stop recording; returns every event, oldest first.")
      .def("events", [](const ScheduleRecorder& r) { return events_list(r.events()); },
           "The events so far (a copy).")
      .def_prop_ro("recording", &ScheduleRecorder::on)
      .def_prop_ro("dropped", &ScheduleRecorder::dropped, "Events lost because the log was full.")
      .def(
          "note",
          [](ScheduleRecorder& r, const std::string& what, uint64_t subject, uint64_t pool, int64_t slot,
             const std::string& detail) {
            if (!r.on()) return;
            ScheduleEvent event;
            event.kind = ScheduleEventKind::Note;
            event.what = what;
            event.subject = subject;
            event.pool = pool;
            event.slot = slot;
            event.detail = detail;
            r.record(std::move(event));
          },
          nb::arg("what"), nb::arg("subject") = 0, nb::arg("pool") = 0, nb::arg("slot") = -1,
          nb::arg("detail") = "", "Record a note from Python (a request's start, admission, end).");
}

}  // namespace muser::bindings
