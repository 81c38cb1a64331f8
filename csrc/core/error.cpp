#include "core/error.h"

namespace muser {

std::string format_where(const std::string& where, const std::string& what) {
  return "[" + where + "] " + what;
}

}  // namespace muser
