#include "backend/registry.h"

#include <algorithm>

#include "core/error.h"

namespace muser {
namespace {

struct Entry {
  std::string name;
  int priority;
  std::function<std::string()> probe;
  std::function<std::unique_ptr<Backend>(const BackendContext&)> create;
};

std::vector<Entry>& entries() {
  static std::vector<Entry> all;
  return all;
}

// Backends a build may lack, and why when it does.
struct Absent {
  const char* name;
  const char* reason;
};
constexpr Absent kKnownAbsent[] = {
    {"cuda", "compiled without CUDA (no CUDA toolkit was used to build muser)"},
    {"metal", "not built: the Metal backend is built only on Apple platforms"},
};

const Entry* find(const std::string& name) {
  for (const Entry& e : entries()) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

std::vector<const Entry*> by_priority() {
  std::vector<const Entry*> out;
  for (const Entry& e : entries()) out.push_back(&e);
  std::stable_sort(out.begin(), out.end(), [](const Entry* a, const Entry* b) {
    return a->priority != b->priority ? a->priority > b->priority : a->name < b->name;
  });
  return out;
}

}  // namespace

BackendRegistration::BackendRegistration(const char* name, int priority, std::function<std::string()> probe,
                                         std::function<std::unique_ptr<Backend>(const BackendContext&)> create) {
  entries().push_back(Entry{name, priority, std::move(probe), std::move(create)});
}

std::vector<BackendInfo> list_backends() {
  std::vector<BackendInfo> out;
  for (const Entry* e : by_priority()) {
    const std::string reason = e->probe();
    out.push_back(BackendInfo{e->name, reason.empty(), reason});
  }
  for (const Absent& a : kKnownAbsent) {
    if (find(a.name) == nullptr) out.push_back(BackendInfo{a.name, false, a.reason});
  }
  return out;
}

std::string resolve_backend(const std::string& requested) {
  if (requested == "auto") {
    for (const Entry* e : by_priority()) {
      if (e->priority > 0 && e->probe().empty()) return e->name;
    }
    throw InvalidArgument("[engine] backend 'auto': no usable backend in this build");
  }
  std::string names = "'auto'";
  for (const BackendInfo& info : list_backends()) {
    if (info.name != requested) {
      names += ", '" + info.name + "'";
      continue;
    }
    if (info.usable) return requested;
    throw InvalidArgument("[engine] backend '" + requested + "' is not usable here: " + info.reason +
                          "; muser.backends() lists what this machine can run");
  }
  throw InvalidArgument("[engine] backend: expected one of " + names + ", got '" + requested + "'");
}

std::unique_ptr<Backend> create_backend(const std::string& name, const BackendContext& context) {
  const Entry* e = find(name);
  if (e == nullptr) throw InternalError("[engine] create_backend: unknown backend '" + name + "'");
  return e->create(context);
}

}  // namespace muser
