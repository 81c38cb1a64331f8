// `_core._testing.tokenizer_encode`: Tokenizer::encode with a chosen merge
// queue, so tests can check that the bucketed queue used for long words
// gives the same ids as the binary heap on any text; and
// `_core._testing.merge_queue_pops`: the order a MergeQueue pops entries in,
// for a test of its ordering contract on its own.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <utility>

#include <string>
#include <vector>

#include "bindings/bindings.h"
#include "core/error.h"
#include "tokenizer/merge_queue.h"
#include "tokenizer/tokenizer.h"

namespace nb = nanobind;

namespace muser::bindings {
namespace {

struct ProbeEntry {
  int32_t left;
  uint32_t priority;
};

}  // namespace

void bind_testing_tokenizer(nb::module_& testing) {
  testing.def(
      "tokenizer_encode",
      [](const Tokenizer& tok, const std::string& text, const std::string& queue, bool add_special,
         bool parse_special) {
        MergeQueueKind kind = MergeQueueKind::Auto;
        if (queue == "heap") {
          kind = MergeQueueKind::Heap;
        } else if (queue == "buckets") {
          kind = MergeQueueKind::Buckets;
        } else if (queue != "auto") {
          throw InvalidArgument("[testing] tokenizer_encode: queue must be 'auto', 'heap' or 'buckets', got '" +
                                queue + "'");
        }
        nb::gil_scoped_release release;
        return tok.encode(text, add_special, parse_special, nullptr, kind);
      },
      nb::arg("tokenizer"), nb::arg("text"), nb::arg("queue"), nb::arg("add_special") = false,
      nb::arg("parse_special") = false,
      "Tokenizer.encode(text) with every word merged through `queue`: 'heap' (the binary heap),\n"
      "'buckets' (MergeQueue) or 'auto' (what encode does: buckets for long words only).");
  testing.def(
      "merge_queue_pops",
      [](const std::vector<std::pair<int64_t, int32_t>>& operations) {
        MergeQueue<ProbeEntry> queue;
        std::vector<std::pair<int64_t, int32_t>> popped;
        for (const auto& [priority, left] : operations) {
          if (priority == -2) {
            queue.clear();
          } else if (priority < 0) {
            ProbeEntry e{};
            if (queue.pop(e)) popped.emplace_back(e.priority, e.left);
          } else if (priority > UINT32_MAX) {
            throw InvalidArgument("[testing] merge_queue_pops: priority above 2^32 - 1");
          } else {
            queue.push(static_cast<uint32_t>(priority), ProbeEntry{left, static_cast<uint32_t>(priority)});
          }
        }
        return popped;
      },
      nb::arg("operations"),
      "Runs (priority, left) operations on a MergeQueue: priority >= 0 pushes, -1 pops, -2 clears.\n"
      "Returns the (priority, left) of every entry popped, in order.");
}

}  // namespace muser::bindings
