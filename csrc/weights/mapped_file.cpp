#include "weights/mapped_file.h"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

namespace muser {

struct MappedFile::Impl {
  std::string path;
  void* base = nullptr;
  size_t size = 0;

  ~Impl() {
    if (base != nullptr && size != 0) munmap(base, size);
  }
};

MappedFile::MappedFile(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw ModelFormatError(format_where("gguf", "cannot open '" + path + "': " + std::strerror(errno)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ModelFormatError(format_where("gguf", "'" + path + "' is not a regular file"));
  }
  impl_->size = static_cast<size_t>(st.st_size);
  if (impl_->size != 0) {
    void* base = mmap(nullptr, impl_->size, PROT_READ, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw ModelFormatError(format_where("gguf", "cannot map '" + path + "': " + std::strerror(err)));
    }
    impl_->base = base;
  }
  ::close(fd);  // the mapping keeps the file alive
}

MappedFile::~MappedFile() = default;
MappedFile::MappedFile(MappedFile&&) noexcept = default;
MappedFile& MappedFile::operator=(MappedFile&&) noexcept = default;

const uint8_t* MappedFile::data() const { return static_cast<const uint8_t*>(impl_->base); }
size_t MappedFile::size() const { return impl_->size; }
const std::string& MappedFile::path() const { return impl_->path; }

}  // namespace muser
