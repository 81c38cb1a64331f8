#include "graph/graph.h"

#include <atomic>

#include "core/error.h"

namespace muser {
namespace {

std::atomic<uint64_t> next_graph_id{1};

}  // namespace

uint64_t new_graph_id() { return next_graph_id.fetch_add(1); }

const char* op_name(OpKind kind) {
  switch (kind) {
    case OpKind::GetRows: return "get_rows";
    case OpKind::MatMul: return "mul_mat";
    case OpKind::RmsNorm: return "rms_norm";
    case OpKind::Add: return "add";
    case OpKind::Scale: return "scale";
    case OpKind::Rope: return "rope";
    case OpKind::Glu: return "glu";
    case OpKind::Softcap: return "softcap";
    case OpKind::SliceCols: return "slice_cols";
    case OpKind::KvStore: return "kv_store";
    case OpKind::Attention: return "attention";
  }
  return "unknown";
}

GraphBuilder::GraphBuilder(const WeightTable& weights, ShapeClass shape)
    : weights_(weights), weight_tensors_(weights.size(), kNoTensor) {
  graph_.shape = shape;
}

void GraphBuilder::check(bool ok, const char* op, const std::string& what) const {
  if (!ok) throw InternalError(std::string("[graph] ") + op + ": " + what);
}

TensorId GraphBuilder::input(InputRole role) {
  TensorDesc t;
  t.kind = TensorKind::Input;
  t.role = role;
  t.rows = role == InputRole::OutputRows ? graph_.shape.n_out : graph_.shape.n_rows;
  t.cols = 1;
  t.name = role == InputRole::Tokens ? "tokens" : role == InputRole::Positions ? "positions" : "output_rows";
  graph_.tensors.push_back(t);
  return static_cast<TensorId>(graph_.tensors.size() - 1);
}

TensorId GraphBuilder::activation(const std::string& name, size_t rows, size_t cols) {
  TensorDesc t;
  t.kind = TensorKind::Activation;
  t.name = name;
  t.rows = rows;
  t.cols = cols;
  graph_.tensors.push_back(t);
  return static_cast<TensorId>(graph_.tensors.size() - 1);
}

TensorId GraphBuilder::weight(uint32_t index) {
  check(index < weights_.size(), "weight", "index out of range");
  if (weight_tensors_[index] == kNoTensor) {
    const WeightDesc& w = weights_[index];
    TensorDesc t;
    t.kind = TensorKind::Weight;
    t.name = w.name;
    t.weight = index;
    t.cols = static_cast<size_t>(w.ne[0]);
    t.rows = static_cast<size_t>(w.ne[1]);
    graph_.tensors.push_back(t);
    weight_tensors_[index] = static_cast<TensorId>(graph_.tensors.size() - 1);
  }
  return weight_tensors_[index];
}

size_t GraphBuilder::cols_of(TensorId t) const { return graph_.tensors[t].cols; }

TensorId GraphBuilder::push_op(const Op& op) {
  graph_.ops.push_back(op);
  return op.dst;
}

namespace {
bool is(const TensorDesc& t, TensorKind kind) { return t.kind == kind; }
}  // namespace

TensorId GraphBuilder::get_rows(TensorId dst, TensorId table, TensorId ids) {
  const TensorDesc &d = desc(dst), &t = desc(table), &i = desc(ids);
  check(is(i, TensorKind::Input) && is(d, TensorKind::Activation) && d.rows == i.rows && d.cols == t.cols,
        "get_rows", "shape mismatch for '" + d.name + "'");
  Op op(OpKind::GetRows);
  op.dst = dst;
  op.src[0] = table;
  op.src[1] = ids;
  return push_op(op);
}

TensorId GraphBuilder::mul_mat(TensorId dst, TensorId w, TensorId x) {
  const TensorDesc &d = desc(dst), &W = desc(w), &X = desc(x);
  check(is(W, TensorKind::Weight) && weights_[W.weight].n_dims == 2 && X.cols == W.cols &&
            d.rows == X.rows && d.cols == W.rows,
        "mul_mat", "shape mismatch for '" + W.name + "'");
  Op op(OpKind::MatMul);
  op.dst = dst;
  op.src[0] = w;
  op.src[1] = x;
  return push_op(op);
}

TensorId GraphBuilder::rms_norm(TensorId dst, TensorId x, TensorId w, float eps, size_t group) {
  const TensorDesc &d = desc(dst), &X = desc(x);
  const size_t g = group == 0 ? X.cols : group;
  check(d.rows == X.rows && d.cols == X.cols && X.cols % g == 0 && w != kNoTensor && desc(w).cols == g,
        "rms_norm", "shape mismatch for '" + d.name + "'");
  Op op(OpKind::RmsNorm);
  op.dst = dst;
  op.src[0] = x;
  op.src[1] = w;
  op.p.eps = eps;
  op.p.group = g;
  return push_op(op);
}

TensorId GraphBuilder::add(TensorId dst, TensorId a, TensorId b) {
  const TensorDesc &d = desc(dst), &A = desc(a), &B = desc(b);
  const bool broadcast = is(B, TensorKind::Weight) && B.rows == 1 && B.cols == A.cols;
  check(d.rows == A.rows && d.cols == A.cols && (broadcast || (B.rows == A.rows && B.cols == A.cols)), "add",
        "shape mismatch for '" + d.name + "'");
  Op op(OpKind::Add);
  op.dst = dst;
  op.src[0] = a;
  op.src[1] = b;
  return push_op(op);
}

TensorId GraphBuilder::scale(TensorId dst, TensorId x, float factor) {
  check(desc(dst).rows == desc(x).rows && desc(dst).cols == desc(x).cols, "scale", "shape mismatch");
  Op op(OpKind::Scale);
  op.dst = dst;
  op.src[0] = x;
  op.p.scalar = factor;
  return push_op(op);
}

TensorId GraphBuilder::rope(TensorId dst, TensorId x, TensorId positions, TensorId divisors, const OpParams& p) {
  const TensorDesc &d = desc(dst), &X = desc(x);
  check(d.rows == X.rows && d.cols == X.cols && X.cols == p.n_head * p.head_dim_k && p.n_rot % 2 == 0 &&
            p.n_rot <= p.head_dim_k && desc(positions).rows == X.rows &&
            (divisors == kNoTensor || desc(divisors).cols == p.n_rot / 2),
        "rope", "shape mismatch for '" + d.name + "'");
  Op op(OpKind::Rope);
  op.dst = dst;
  op.src[0] = x;
  op.src[1] = positions;
  op.src[2] = divisors;
  op.p = p;
  return push_op(op);
}

TensorId GraphBuilder::glu(TensorId dst, TensorId gate, TensorId up, GluKind kind) {
  const TensorDesc &d = desc(dst), &G = desc(gate), &U = desc(up);
  check(d.rows == G.rows && d.cols == G.cols && U.rows == G.rows && U.cols == G.cols, "glu", "shape mismatch");
  Op op(OpKind::Glu);
  op.dst = dst;
  op.src[0] = gate;
  op.src[1] = up;
  op.p.glu = kind;
  return push_op(op);
}

TensorId GraphBuilder::softcap(TensorId dst, TensorId x, float cap) {
  check(desc(dst).rows == desc(x).rows && desc(dst).cols == desc(x).cols && cap > 0, "softcap", "bad shape or cap");
  Op op(OpKind::Softcap);
  op.dst = dst;
  op.src[0] = x;
  op.p.scalar = cap;
  return push_op(op);
}

TensorId GraphBuilder::slice_cols(TensorId dst, TensorId x, size_t offset) {
  check(desc(dst).rows == desc(x).rows && offset + desc(dst).cols <= desc(x).cols && dst != x, "slice_cols",
        "shape mismatch for '" + desc(dst).name + "'");
  Op op(OpKind::SliceCols);
  op.dst = dst;
  op.src[0] = x;
  op.p.offset = offset;
  return push_op(op);
}

void GraphBuilder::kv_store(uint32_t layer, TensorId k, TensorId v) {
  check(desc(k).rows == graph_.shape.n_rows && desc(v).rows == graph_.shape.n_rows, "kv_store", "row mismatch");
  Op op(OpKind::KvStore);
  op.src[0] = k;
  op.src[1] = v;
  op.p.layer = layer;
  push_op(op);
}

TensorId GraphBuilder::attention(TensorId dst, TensorId q, const OpParams& p) {
  const TensorDesc &d = desc(dst), &Q = desc(q);
  check(p.n_head_kv > 0 && p.n_head % p.n_head_kv == 0 && Q.cols == p.n_head * p.head_dim_k &&
            d.cols == p.n_head * p.head_dim_v && d.rows == Q.rows && Q.rows == graph_.shape.n_rows && dst != q,
        "attention", "shape mismatch for '" + d.name + "'");
  Op op(OpKind::Attention);
  op.dst = dst;
  op.src[0] = q;
  op.p = p;
  return push_op(op);
}

void GraphBuilder::end_layer() { graph_.layer_end.push_back(graph_.ops.size()); }

void GraphBuilder::set_hidden(TensorId t) {
  check(desc(t).kind == TensorKind::Activation && desc(t).rows == graph_.shape.n_rows, "set_hidden", "row mismatch");
  graph_.hidden = t;
}

StepGraph GraphBuilder::finish(TensorId logits) {
  check(desc(logits).rows == graph_.shape.n_out, "finish", "logits rows != output rows");
  check(!graph_.shape.hidden || graph_.hidden != kNoTensor, "finish", "the shape class wants hidden states");
  graph_.logits = logits;
  graph_.id = new_graph_id();
  return std::move(graph_);
}

}  // namespace muser
