#include "engine/segment_checks.h"

#include <string>

#include "core/error.h"

namespace muser {

void check_segments(const std::vector<ForwardSegment>& segments, uint32_t n_vocab, const char* where) {
  auto fail = [&](const std::string& what) { throw InvalidArgument(format_where(where, what)); };
  if (segments.empty()) fail("forward: expected at least one segment, got 0");
  for (size_t s = 0; s < segments.size(); ++s) {
    const ForwardSegment& seg = segments[s];
    if (seg.kv == nullptr || seg.tokens == nullptr) {
      throw InternalError(format_where(where, "forward: segment " + std::to_string(s) + " has no KV state or tokens"));
    }
    for (size_t other = 0; other < s; ++other) {
      if (segments[other].kv == seg.kv) fail("forward: one session appears in two segments");
    }
    if (seg.n_tokens == 0 || seg.n_tokens > kMaxStepRows) {
      fail("forward: expected 1.." + std::to_string(kMaxStepRows) + " rows per segment, got " +
           std::to_string(seg.n_tokens));
    }
    size_t max_context = seg.kv->max_context();
    if (seg.start > max_context || seg.n_tokens > max_context - seg.start) {
      fail("forward: positions [" + std::to_string(seg.start) + ", " + std::to_string(seg.start + seg.n_tokens) +
           ") past max_context " + std::to_string(max_context));
    }
    for (size_t i = 0; i < seg.n_tokens; ++i) {
      int32_t t = seg.tokens[i];
      if (t < 0 || static_cast<uint32_t>(t) >= n_vocab) {
        fail("forward: token id " + std::to_string(t) + " out of range [0, " + std::to_string(n_vocab) + ")");
      }
    }
    size_t end = seg.replay ? seg.start + seg.n_tokens : seg.start;
    if (!seg.kv->intact(seg.start, end)) {
      throw InternalError(format_where(where, "forward: KV state not intact for positions before " +
                                                  std::to_string(end)));
    }
  }
}

size_t total_rows(const std::vector<ForwardSegment>& segments) {
  size_t rows = 0;
  for (const ForwardSegment& seg : segments) rows += seg.n_tokens;
  return rows;
}

}  // namespace muser
