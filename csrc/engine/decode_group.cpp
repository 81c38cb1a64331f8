#include "engine/decode_group.h"

#include <algorithm>
#include <mutex>
#include <string>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/session.h"

namespace muser {

void decode_group(Engine& engine, const std::vector<Session*>& sessions, const std::vector<int32_t>& tokens) {
  const size_t n = sessions.size();
  if (n == 0 || n > kMaxDecodeGroup) {
    throw InvalidArgument("[decode_group] expected 1.." + std::to_string(kMaxDecodeGroup) + " sessions, got " +
                          std::to_string(n));
  }
  if (tokens.size() != n) {
    throw InvalidArgument("[decode_group] expected one token per session (" + std::to_string(n) + "), got " +
                          std::to_string(tokens.size()));
  }
  for (size_t i = 0; i < n; ++i) {
    if (sessions[i] == nullptr || sessions[i]->engine_.get() != &engine) {
      throw InvalidArgument("[decode_group] session " + std::to_string(i) + " belongs to another engine");
    }
    for (size_t j = 0; j < i; ++j) {
      if (sessions[j] == sessions[i]) throw InvalidArgument("[decode_group] a session appears twice");
    }
  }
  // Locked in address order, so two overlapping groups cannot deadlock.
  std::vector<Session*> lock_order(sessions);
  std::sort(lock_order.begin(), lock_order.end());
  std::vector<std::unique_lock<std::mutex>> locks;
  locks.reserve(n);
  for (Session* s : lock_order) locks.emplace_back(s->mutex_);

  std::vector<ForwardSegment> segments(n);
  for (size_t i = 0; i < n; ++i) {
    Session& s = *sessions[i];
    s.check_tokens(&tokens[i], 1, "decode_group");
    s.history_.reserve(s.history_.size() + 1);
  }
  for (size_t i = 0; i < n; ++i) {
    Session& s = *sessions[i];
    s.ensure_resumable();
    ForwardSegment& seg = segments[i];
    seg.kv = s.kv_.get();
    seg.tokens = &tokens[i];
    seg.n_tokens = 1;
    seg.start = s.history_.size();
    seg.logits = s.staged_logits_.data();
  }
  try {
    engine.forward(segments);
  } catch (...) {
    for (Session* s : sessions) s->kv_->forget_from(s->history_.size());
    throw;
  }
  for (size_t i = 0; i < n; ++i) {
    Session& s = *sessions[i];
    s.history_.push_back(tokens[i]);  // capacity reserved: cannot throw
    s.logits_.swap(s.staged_logits_);
    s.has_logits_ = true;
  }
}

}  // namespace muser
