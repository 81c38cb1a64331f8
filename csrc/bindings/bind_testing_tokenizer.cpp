// `_core._testing.tokenizer_encode`: Tokenizer::encode with a chosen merge
// queue, so tests can check that the bucketed queue used for long words
// gives the same ids as the binary heap on any text; and
// `_core._testing.merge_queue_pops`: the order a MergeQueue pops entries in,
// for a test of its ordering contract on its own; and
// `_core._testing.regex_matches`: a pre-tokenizer regex's matches through
// search() (specialised scans included) or the backtracking engine alone.
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
#include "tokenizer/regex_matcher.h"
#include "tokenizer/thread_scratch.h"
#include "tokenizer/unicode_text.h"
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
        } else if (queue == "runs") {
          kind = MergeQueueKind::ByteRuns;
        } else if (queue != "auto") {
          throw InvalidArgument(
              "[testing] tokenizer_encode: queue must be 'auto', 'heap', 'buckets' or 'runs', got '" + queue + "'");
        }
        nb::gil_scoped_release release;
        return tok.encode(text, add_special, parse_special, nullptr, kind);
      },
      nb::arg("tokenizer"), nb::arg("text"), nb::arg("queue"), nb::arg("add_special") = false,
      nb::arg("parse_special") = false,
      "Tokenizer.encode(text) with every word merged through `queue`: 'heap' (the binary heap),\n"
      "'buckets' (MergeQueue) or 'auto' (what encode does: buckets for long words only, the\n"
      "byte-run shortcut for long runs of one byte where it applies); 'runs' is 'auto' with the\n"
      "shortcut for runs of every length. 'heap' and 'buckets' never take the shortcut.");
  testing.def(
      "utf8_decode",
      [](nb::bytes data, bool fast) {
        const std::string_view text(data.c_str(), data.size());
        std::vector<std::pair<uint32_t, size_t>> out;
        size_t offset = 0;
        while (offset < text.size()) {
          const uint32_t cp = fast ? unicode::decode_one_fast(text, offset) : unicode::decode_one(text, offset);
          out.emplace_back(cp, offset);
        }
        return out;
      },
      nb::arg("data"), nb::arg("fast"),
      "(code point, offset after it) for each step of decoding `data` with unicode::decode_one_fast\n"
      "(fast=True, what the pre-tokenizer uses) or unicode::decode_one.");
  testing.def(
      "tokenizer_kept_scratch_bytes",
      [] { return std::make_pair(Tokenizer::kept_scratch_bytes(), kept_id_buffer_bytes()); },
      "(BPE work buffers, ids buffer): bytes the calling thread keeps between Tokenizer.encode calls.");
  testing.def("tokenizer_kept_scratch_limit", [] { return kKeptScratchBytes; },
              "The most bytes of each kind the calling thread keeps between encode calls.");
  testing.def(
      "tokenizer_byte_run_shortcut",
      [](const Tokenizer& tok, int byte) {
        if (byte < 0 || byte > 255) throw InvalidArgument("[testing] tokenizer_byte_run_shortcut: byte outside 0..255");
        return tok.byte_run_shortcut(static_cast<uint8_t>(byte));
      },
      nb::arg("tokenizer"), nb::arg("byte"),
      "Whether BPE words made of `byte` repeated take the run shortcut (csrc/tokenizer/byte_runs.h).");
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
  testing.def(
      "regex_matches",
      [](const std::string& pattern, const std::string& text, size_t begin, int64_t end, bool general) {
        const pretok::Regex re(pattern);
        std::vector<uint32_t> symbols;
        for (uint32_t cp : unicode::decode_utf8(text)) symbols.push_back(pretok::symbol_of(cp, re.view()));
        const size_t stop = end < 0 ? symbols.size() : static_cast<size_t>(end);
        if (begin > stop || stop > symbols.size()) {
          throw InvalidArgument("[testing] regex_matches: need 0 <= begin <= end <= number of code points");
        }
        nb::gil_scoped_release release;
        pretok::RegexScratch scratch;
        std::vector<std::pair<size_t, size_t>> matches;
        size_t from = begin, mb = 0, me = 0;
        while (from < stop && (general ? re.search_general(symbols.data(), begin, stop, from, mb, me, scratch)
                                       : re.search(symbols.data(), begin, stop, from, mb, me, scratch))) {
          matches.emplace_back(mb, me);
          from = me;
        }
        return matches;
      },
      nb::arg("pattern"), nb::arg("text"), nb::arg("begin") = 0, nb::arg("end") = -1, nb::arg("general") = false,
      "Successive leftmost matches of a pre-tokenizer `pattern` in the code points [begin, end) of `text`\n"
      "(end -1: all), as (begin, end) code-point ranges, the way the pre-tokenizer walks a piece.\n"
      "general=True uses the backtracking engine only (no specialised scan).");
  testing.def(
      "regex_has_fast_path", [](const std::string& pattern) { return pretok::Regex(pattern).has_fast_path(); },
      nb::arg("pattern"), "Whether search() uses a specialised scan for `pattern`.");
}

}  // namespace muser::bindings
