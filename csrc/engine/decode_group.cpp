// Session::decode_group: 1..4 rows from different sessions in one forward.
#include <algorithm>
#include <set>
#include <string>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/session.h"

namespace muser {

void Session::decode_group(const std::vector<Session*>& sessions, const std::vector<int32_t>& tokens) {
  const size_t n = sessions.size();
  if (n == 0 || n > kMaxDecodeGroupRows) {
    throw InvalidArgument("[decode_group] expected 1.." + std::to_string(kMaxDecodeGroupRows) +
                          " sessions, got " + std::to_string(n));
  }
  if (tokens.size() != n) {
    throw InvalidArgument("[decode_group] expected one token per session (" + std::to_string(n) + "), got " +
                          std::to_string(tokens.size()));
  }
  std::set<uint64_t> ids;
  for (size_t i = 0; i < n; ++i) {
    if (sessions[i] == nullptr) throw InvalidArgument("[decode_group] session " + std::to_string(i) + " is None");
    if (sessions[i]->engine_ != sessions[0]->engine_) {
      throw InvalidArgument("[decode_group] session " + std::to_string(i) + " belongs to another engine");
    }
    if (!ids.insert(sessions[i]->id_).second) {
      throw InvalidArgument("[decode_group] session " + std::to_string(i) + " appears more than once");
    }
  }
  // Lock in id order so two overlapping groups can never deadlock.
  std::vector<Session*> by_id(sessions);
  std::sort(by_id.begin(), by_id.end(), [](const Session* a, const Session* b) { return a->id_ < b->id_; });
  std::vector<std::unique_lock<std::mutex>> locks;
  locks.reserve(n);
  for (Session* s : by_id) locks.emplace_back(s->mutex_);

  for (size_t i = 0; i < n; ++i) {
    sessions[i]->check_tokens(&tokens[i], 1, ("decode_group row " + std::to_string(i)).c_str());
  }
  for (Session* s : sessions) s->history_.reserve(s->history_.size() + 1);
  for (Session* s : sessions) s->ensure_resumable();

  Engine& engine = *sessions[0]->engine_;
  std::vector<ForwardSegment> segments(n);
  for (size_t i = 0; i < n; ++i) {
    Session* s = sessions[i];
    segments[i].kv = s->kv_.get();
    segments[i].tokens = &tokens[i];
    segments[i].n_tokens = 1;
    segments[i].start = s->history_.size();
    segments[i].logits = s->staged_logits_.get();
  }
  try {
    Permit permit = engine.scheduler().acquire_decode_group(ids);
    engine.forward(permit, segments);
  } catch (...) {
    for (Session* s : sessions) s->kv_->forget_from(s->history_.size());
    throw;
  }
  for (size_t i = 0; i < n; ++i) sessions[i]->commit(&tokens[i], 1);
}

}  // namespace muser
