// Runs one op of csrc/backend/metal/ops_encode.h on the emulator, for the
// pytest suite (tests/backend/test_metal_kernels.py).
//
//   op_runner DIR ORDER SEED
//
// DIR/op.txt holds "key value" lines (op = the op's name, then its shape
// parameters); inputs are DIR/<name>.bin raw little-endian arrays; outputs
// are written as DIR/<name>.bin. Every buffer is allocated at exactly its
// size so AddressSanitizer flags any access past it; outputs start as 0xff
// bytes (NaN) so an element a kernel forgot to write shows up.
// Exit status: 0 ok, 3 an error from the op logic or the emulator (message on
// stderr), 2 bad usage.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "backend/metal/ops_encode.h"
#include "core/error.h"
#include "emulator_encoder.h"

namespace {

using muser::metal::BufferSlice;
using muser::metal::DeviceBuffer;

struct HostBuffer {
  std::unique_ptr<unsigned char[]> data;
  size_t bytes = 0;
  BufferSlice slice() const { return BufferSlice{DeviceBuffer{data.get(), bytes}, 0}; }
};

class Case {
 public:
  explicit Case(std::string dir) : dir_(std::move(dir)) {
    std::ifstream in(dir_ + "/op.txt");
    if (!in) throw std::runtime_error("cannot read " + dir_ + "/op.txt");
    std::string key, value;
    while (in >> key >> value) params_[key] = value;
  }

  std::string text(const std::string& key) const {
    auto it = params_.find(key);
    if (it == params_.end()) throw std::runtime_error("op.txt lacks " + key);
    return it->second;
  }
  uint32_t u32(const std::string& key) const { return static_cast<uint32_t>(std::stoul(text(key))); }
  float f32(const std::string& key) const { return std::stof(text(key)); }

  HostBuffer& input(const std::string& name) {
    std::ifstream in(dir_ + "/" + name + ".bin", std::ios::binary | std::ios::ate);
    if (!in) throw std::runtime_error("cannot read " + name + ".bin");
    HostBuffer& b = buffers_[name];
    b.bytes = static_cast<size_t>(in.tellg());
    b.data.reset(new unsigned char[b.bytes == 0 ? 1 : b.bytes]);
    in.seekg(0);
    in.read(reinterpret_cast<char*>(b.data.get()), static_cast<std::streamsize>(b.bytes));
    return b;
  }

  HostBuffer& output(const std::string& name, size_t bytes) {
    HostBuffer& b = buffers_[name];
    b.bytes = bytes;
    b.data.reset(new unsigned char[bytes == 0 ? 1 : bytes]);
    std::memset(b.data.get(), 0xff, bytes);
    outputs_.push_back(name);
    return b;
  }

  // An input that the op also writes (in-place ops): written back as `out_name`.
  HostBuffer& inout(const std::string& name, const std::string& out_name) {
    HostBuffer& b = input(name);
    aliases_[out_name] = name;
    return b;
  }

  void write_outputs() {
    for (const auto& [out, in] : aliases_) write(out, buffers_[in]);
    for (const std::string& name : outputs_) write(name, buffers_[name]);
  }

 private:
  void write(const std::string& name, const HostBuffer& b) {
    std::ofstream out(dir_ + "/" + name + ".bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(b.data.get()), static_cast<std::streamsize>(b.bytes));
  }

  std::string dir_;
  std::map<std::string, std::string> params_;
  std::map<std::string, HostBuffer> buffers_;
  std::vector<std::string> outputs_;
  std::map<std::string, std::string> aliases_;
};

muser::DType dtype_named(const std::string& name) {
  static const std::map<std::string, muser::DType> types = {
      {"F32", muser::DType::F32},   {"F16", muser::DType::F16},   {"BF16", muser::DType::BF16},
      {"Q4_0", muser::DType::Q4_0}, {"Q4_1", muser::DType::Q4_1}, {"Q5_0", muser::DType::Q5_0},
      {"Q5_1", muser::DType::Q5_1}, {"Q8_0", muser::DType::Q8_0}, {"Q2_K", muser::DType::Q2_K},
      {"Q3_K", muser::DType::Q3_K}, {"Q4_K", muser::DType::Q4_K}, {"Q5_K", muser::DType::Q5_K},
      {"Q6_K", muser::DType::Q6_K}};
  auto it = types.find(name);
  if (it == types.end()) throw std::runtime_error("unknown type " + name);
  return it->second;
}

void run(Case& c, muser::metal::KernelEncoder& enc) {
  namespace m = muser::metal;
  const std::string op = c.text("op");
  if (op == "matmul") {
    const uint32_t n_in = c.u32("n_in"), n_out = c.u32("n_out"), n_rows = c.u32("n_rows");
    HostBuffer& w = c.input("w");
    HostBuffer& x = c.input("x");
    HostBuffer& y = c.output("y", size_t(n_rows) * n_out * 4);
    m::encode_matmul(enc, dtype_named(c.text("type")), w.slice(), n_in, n_out, x.slice(), n_in, n_rows, y.slice(),
                     n_out);
  } else if (op == "get_rows") {
    const uint32_t n_in = c.u32("n_in"), n_ids = c.u32("n_ids");
    HostBuffer& w = c.input("w");
    HostBuffer& ids = c.input("ids");
    HostBuffer& out = c.output("out", size_t(n_ids) * n_in * 4);
    m::encode_get_rows(enc, dtype_named(c.text("type")), w.slice(), n_in, c.u32("n_table_rows"), ids.slice(), n_ids,
                       out.slice(), n_in);
  } else if (op == "rms_norm") {
    const uint32_t n = c.u32("n"), n_groups = c.u32("n_groups"), n_rows = c.u32("n_rows");
    const uint32_t row = n * n_groups;
    HostBuffer& x = c.input("x");
    const BufferSlice w = c.u32("has_weight") != 0 ? c.input("w").slice() : BufferSlice{};
    if (c.u32("in_place") != 0) {
      c.inout("x", "out");
      m::encode_rms_norm(enc, x.slice(), row, w, n, n_groups, n_rows, c.f32("eps"), x.slice(), row);
    } else {
      HostBuffer& out = c.output("out", size_t(n_rows) * row * 4);
      m::encode_rms_norm(enc, x.slice(), row, w, n, n_groups, n_rows, c.f32("eps"), out.slice(), row);
    }
  } else if (op == "rope") {
    const uint32_t n_heads = c.u32("n_heads"), head_dim = c.u32("head_dim");
    HostBuffer& x = c.inout("x", "x_out");
    HostBuffer& cs = c.input("cos_sin");
    m::encode_rope(enc, x.slice(), n_heads * head_dim, c.u32("n_rows"), n_heads, head_dim, c.u32("n_rot"),
                   c.u32("neox") != 0, cs.slice());
  } else if (op == "kv_store") {
    const uint32_t width = c.u32("width");
    HostBuffer& src = c.input("src");
    HostBuffer& plane = c.inout("plane", "plane_out");
    m::encode_kv_store(enc, src.slice(), width, c.u32("n_rows"), width, c.u32("start"), c.u32("ring_rows"),
                       plane.slice(), c.u32("plane_rows"));
  } else if (op == "attention") {
    m::AttentionShape s;
    s.n_head = c.u32("n_head");
    s.n_head_kv = c.u32("n_head_kv");
    s.head_dim_k = c.u32("head_dim_k");
    s.head_dim_v = c.u32("head_dim_v");
    s.plane_rows = c.u32("plane_rows");
    s.ring_rows = c.u32("ring_rows");
    s.scale = c.f32("scale");
    s.softcap = c.f32("softcap");
    const uint32_t n_rows = c.u32("n_rows");
    HostBuffer& q = c.input("q");
    HostBuffer& k = c.input("k");
    HostBuffer& v = c.input("v");
    HostBuffer& ranges = c.input("ranges");
    HostBuffer& out = c.output("out", size_t(n_rows) * s.n_head * s.head_dim_v * 4);
    m::encode_attention(enc, s, q.slice(), s.n_head * s.head_dim_k, n_rows, k.slice(), v.slice(), ranges.slice(),
                        out.slice(), s.n_head * s.head_dim_v);
  } else if (op == "swiglu" || op == "geglu") {
    const uint32_t n = c.u32("n"), n_rows = c.u32("n_rows");
    HostBuffer& gate = c.input("gate");
    HostBuffer& up = c.input("up");
    HostBuffer& out = c.output("out", size_t(n_rows) * n * 4);
    m::encode_glu(enc, op == "swiglu" ? m::GluKind::SwiGlu : m::GluKind::GeGlu, gate.slice(), n, up.slice(), n, n,
                  n_rows, out.slice(), n);
  } else if (op == "add") {
    const uint32_t n = c.u32("n"), n_rows = c.u32("n_rows");
    HostBuffer& a = c.input("a");
    HostBuffer& b = c.input("b");
    HostBuffer& out = c.output("out", size_t(n_rows) * n * 4);
    m::encode_add(enc, a.slice(), n, b.slice(), c.u32("broadcast") != 0 ? 0 : n, n, n_rows, out.slice(), n);
  } else if (op == "copy_cols") {
    // SliceCols: columns [offset, offset + n) of (n_rows, cols) rows.
    const uint32_t n = c.u32("n"), n_rows = c.u32("n_rows"), cols = c.u32("cols"), offset = c.u32("offset");
    HostBuffer& x = c.input("x");
    HostBuffer& out = c.output("out", size_t(n_rows) * n * 4);
    BufferSlice from = x.slice();
    from.offset = size_t(offset) * 4;
    m::encode_copy(enc, from, cols, n, n_rows, out.slice(), n);
  } else if (op == "scale" || op == "softcap") {
    const uint32_t n = c.u32("n"), n_rows = c.u32("n_rows");
    HostBuffer& x = c.input("x");
    HostBuffer& out = c.output("out", size_t(n_rows) * n * 4);
    if (op == "scale") {
      m::encode_scale(enc, x.slice(), n, c.f32("value"), n, n_rows, out.slice(), n);
    } else {
      m::encode_softcap(enc, x.slice(), n, c.f32("value"), n, n_rows, out.slice(), n);
    }
  } else if (op == "raw") {
    // A bare kernel (the emulator's self-tests): buffer 0 = `n_out` floats,
    // optional threadgroup memory 0, a 1-D grid.
    HostBuffer& out = c.output("out", size_t(c.u32("n_out")) * 4);
    enc.set_pipeline(c.text("kernel").c_str());
    enc.set_buffer(0, out.slice().buffer, 0);
    if (c.u32("threadgroup_bytes") != 0) enc.set_threadgroup_memory(0, c.u32("threadgroup_bytes"));
    enc.dispatch({c.u32("groups"), 1, 1}, {c.u32("threads"), 1, 1});
  } else {
    throw std::runtime_error("unknown op " + op);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: op_runner DIR forward|reverse|random SEED\n";
    return 2;
  }
  try {
    Case c(argv[1]);
    mtlemu::EmulatorEncoder enc(mtlemu::parse_order(argv[2]), std::stoull(argv[3]));
    run(c, enc);
    c.write_outputs();
  } catch (const mtlemu::EmulatorError& e) {
    std::cerr << "emulator error: " << e.what() << "\n";
    return 3;
  } catch (const muser::InvalidArgument& e) {
    std::cerr << "invalid argument: " << e.what() << "\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "op_runner: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
