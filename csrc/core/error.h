// Typed errors of the core. Every failure that can reach Python is one of
// these; the bindings translate each to the matching muser.* exception once.
// Messages follow "[where] what: expected X, got Y".
#pragma once

#include <stdexcept>
#include <string>

namespace muser {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A GGUF file that is malformed, truncated or uses something we do not support.
class ModelFormatError : public Error {
 public:
  using Error::Error;
};

// A caller passed a value outside the documented domain (-> ValueError).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A sequence would grow past its context limit.
class ContextOverflow : public Error {
 public:
  using Error::Error;
};

// The operation was cancelled by its owner.
class Cancelled : public Error {
 public:
  using Error::Error;
};

// Admission is full: too many waiters already queued.
class Overloaded : public Error {
 public:
  using Error::Error;
};

// A pool or scheduler latched into an unknown state; nothing more runs on it.
class Unhealthy : public Error {
 public:
  using Error::Error;
};

// A bounded wait ran out (-> TimeoutError).
class Timeout : public Error {
 public:
  using Error::Error;
};

// An accelerator ran out of device memory (-> muser.DeviceMemoryError, a
// MemoryError). The message names what was being allocated and for what.
class DeviceMemoryError : public Error {
 public:
  using Error::Error;
};

// A broken internal invariant. Thrown instead of asserting so the host
// process never dies.
class InternalError : public Error {
 public:
  using Error::Error;
};

// Builds "[where] what" messages without iostream boilerplate at call sites.
std::string format_where(const std::string& where, const std::string& what);

}  // namespace muser
