#include "tokenizer/regex_matcher.h"

#include <limits>
#include <memory>

#include "core/error.h"
#include "tokenizer/unicode_text.h"

namespace muser::pretok {
namespace {

constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();

[[noreturn]] void syntax_error(const std::string& pattern, const std::string& what) {
  throw InternalError(format_where("tokenizer regex", what + " in pattern '" + pattern + "'"));
}

// What \p{X} means in the collapsed view: the class byte of non-ASCII code
// points of that class plus the ASCII members (these ASCII lists are
// llama.cpp's; note that '~' is not in its symbol list).
void add_category(SymbolSet& set, char category) {
  using namespace unicode;
  switch (category) {
    case 'N':
      set.add_range(kCollapsedNumber, kCollapsedNumber);
      set.add_range('0', '9');
      break;
    case 'L':
      set.add_range(kCollapsedLetter, kCollapsedLetter);
      set.add_range('A', 'Z');
      set.add_range('a', 'z');
      break;
    case 'P':
      set.add_range(kCollapsedPunctuation, kCollapsedPunctuation);
      set.add_range(0x21, 0x23);
      set.add_range(0x25, 0x2A);
      set.add_range(0x2C, 0x2F);
      set.add_range(0x3A, 0x3B);
      set.add_range(0x3F, 0x40);
      set.add_range(0x5B, 0x5D);
      set.add_range(0x5F, 0x5F);
      set.add_range(0x7B, 0x7B);
      set.add_range(0x7D, 0x7D);
      break;
    case 'M':
      set.add_range(kCollapsedMark, kCollapsedMark);
      break;
    case 'S':
      set.add_range(kCollapsedSymbol, kCollapsedSymbol);
      set.add_range(0x24, 0x24);
      set.add_range(0x2B, 0x2B);
      set.add_range(0x3C, 0x3E);
      set.add_range(0x5E, 0x5E);
      set.add_range(0x60, 0x60);
      set.add_range(0x7C, 0x7C);
      break;
    default:
      break;
  }
}

void add_whitespace(SymbolSet& set) {
  set.add_range(0x09, 0x0D);
  set.add_range(0x20, 0x20);
}

}  // namespace

uint32_t symbol_of(uint32_t cp, SymbolView view) {
  if (cp < 0x80) return cp;
  if (view == SymbolView::Collapsed) return unicode::collapsed_byte(cp);
  return unicode::is_whitespace(cp) ? unicode::kCollapsedWhitespace : cp;
}

void SymbolSet::add_range(uint32_t first, uint32_t last) {
  for (uint32_t v = first; v <= last && v < 256; ++v) low[v >> 6] |= uint64_t{1} << (v & 63);
  if (last >= 256) high.emplace_back(first < 256 ? 256 : first, last);
}

struct Regex::Node {
  enum class Kind { Set, Concat, Alt, Repeat, Look, Begin, End };
  Kind kind = Kind::Concat;
  int32_t set = -1;
  uint32_t min = 1;
  uint32_t max = 1;
  bool negate = false;
  std::vector<std::unique_ptr<Node>> kids;
};

// Recursive-descent parser over the pattern's code points.
class Regex::Parser {
 public:
  Parser(Regex& re, std::vector<uint32_t> cps) : re_(re), cps_(std::move(cps)) {}

  std::unique_ptr<Node> parse() {
    auto node = alternation();
    if (pos_ != cps_.size()) fail("unbalanced ')'");
    return node;
  }

 private:
  bool at_end() const { return pos_ >= cps_.size(); }
  uint32_t peek(size_t ahead = 0) const { return pos_ + ahead < cps_.size() ? cps_[pos_ + ahead] : 0; }
  [[noreturn]] void fail(const std::string& what) const {
    syntax_error(re_.pattern_, what + " at code point " + std::to_string(pos_));
  }

  std::unique_ptr<Node> alternation() {
    auto alt = std::make_unique<Node>();
    alt->kind = Node::Kind::Alt;
    alt->kids.push_back(sequence());
    while (!at_end() && peek() == '|') {
      ++pos_;
      alt->kids.push_back(sequence());
    }
    if (alt->kids.size() == 1) return std::move(alt->kids[0]);
    return alt;
  }

  std::unique_ptr<Node> sequence() {
    auto seq = std::make_unique<Node>();
    seq->kind = Node::Kind::Concat;
    while (!at_end() && peek() != '|' && peek() != ')') {
      auto atom = parse_atom();
      seq->kids.push_back(quantified(std::move(atom)));
    }
    return seq;
  }

  uint32_t parse_number() {
    if (at_end() || peek() < '0' || peek() > '9') fail("expected a number in {m,n}");
    uint32_t value = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      value = value * 10 + (peek() - '0');
      if (value > 100000) fail("repetition count too large");
      ++pos_;
    }
    return value;
  }

  std::unique_ptr<Node> quantified(std::unique_ptr<Node> atom) {
    if (at_end()) return atom;
    uint32_t min = 1, max = 1;
    const uint32_t c = peek();
    if (c == '?') {
      min = 0; max = 1; ++pos_;
    } else if (c == '*') {
      min = 0; max = kUnbounded; ++pos_;
    } else if (c == '+') {
      min = 1; max = kUnbounded; ++pos_;
    } else if (c == '{') {
      ++pos_;
      min = parse_number();
      max = min;
      if (!at_end() && peek() == ',') {
        ++pos_;
        max = (!at_end() && peek() == '}') ? kUnbounded : parse_number();
      }
      if (at_end() || peek() != '}') fail("unterminated {m,n}");
      ++pos_;
      if (max < min) fail("{m,n} with n < m");
    } else {
      return atom;
    }
    if (!at_end() && (peek() == '?' || peek() == '+')) fail("lazy or possessive quantifiers are not supported");
    if (atom->kind == Node::Kind::Look || atom->kind == Node::Kind::Begin || atom->kind == Node::Kind::End) {
      fail("quantified assertion");
    }
    auto rep = std::make_unique<Node>();
    rep->kind = Node::Kind::Repeat;
    rep->min = min;
    rep->max = max;
    rep->kids.push_back(std::move(atom));
    return rep;
  }

  std::unique_ptr<Node> set_node(SymbolSet set) {
    auto node = std::make_unique<Node>();
    node->kind = Node::Kind::Set;
    node->set = static_cast<int32_t>(re_.sets_.size());
    re_.sets_.push_back(std::move(set));
    return node;
  }

  uint32_t literal(uint32_t cp) {
    if (re_.view_ == SymbolView::Collapsed && cp >= 0x80) {
      fail("non-ASCII literal in a pattern that uses \\p{...}");
    }
    return cp;
  }

  // \p{X}: returns the category letter.
  char parse_category() {
    if (at_end() || peek() != '{') fail("expected '{' after \\p");
    ++pos_;
    std::string name;
    while (!at_end() && peek() != '}') name.push_back(static_cast<char>(cps_[pos_++]));
    if (at_end()) fail("unterminated \\p{");
    ++pos_;
    if (name == "L" || name == "Lu" || name == "Ll" || name == "Lt" || name == "Lm" || name == "Lo") return 'L';
    if (name == "N" || name == "P" || name == "M" || name == "S") return name[0];
    fail("unsupported category \\p{" + name + "}");
  }

  // An escape (after the backslash) that names one code point, or -1.
  int64_t simple_escape(uint32_t c) const {
    switch (c) {
      case 'r': return '\r';
      case 'n': return '\n';
      case 't': return '\t';
      case 'f': return '\f';
      case 'v': return '\v';
      default: break;
    }
    if (c < 0x80 && !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) {
      return c;  // identity escape of punctuation
    }
    return -1;
  }

  std::unique_ptr<Node> parse_atom() {
    const uint32_t c = cps_[pos_++];
    switch (c) {
      case '(': {
        bool look = false, negate = false;
        if (peek() == '?') {
          if (peek(1) == ':') {
            pos_ += 2;
          } else if (peek(1) == '=' || peek(1) == '!') {
            look = true;
            negate = peek(1) == '!';
            pos_ += 2;
          } else {
            fail("unsupported group syntax");
          }
        }
        auto inner = alternation();
        if (at_end() || peek() != ')') fail("missing ')'");
        ++pos_;
        if (!look) return inner;
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::Look;
        node->negate = negate;
        node->kids.push_back(std::move(inner));
        return node;
      }
      case '[':
        return parse_class();
      case '^': {
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::Begin;
        return node;
      }
      case '$': {
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::End;
        return node;
      }
      case '.':
        fail("'.' is not supported");
      case '\\': {
        if (at_end()) fail("trailing backslash");
        const uint32_t e = cps_[pos_++];
        SymbolSet set;
        if (e == 's' || e == 'S') {
          add_whitespace(set);
          set.negated = e == 'S';
        } else if (e == 'd' || e == 'D') {
          set.add_range('0', '9');
          set.negated = e == 'D';
        } else if (e == 'p' || e == 'P') {
          if (re_.view_ != SymbolView::Collapsed) fail("internal: \\p in wide view");
          add_category(set, parse_category());
          set.negated = e == 'P';
        } else {
          const int64_t cp = simple_escape(e);
          if (cp < 0) fail("unsupported escape");
          set.add_range(static_cast<uint32_t>(cp), static_cast<uint32_t>(cp));
        }
        return set_node(std::move(set));
      }
      case '*':
      case '+':
      case '?':
      case '{':
        fail("quantifier without an operand");
      default: {
        SymbolSet set;
        const uint32_t cp = literal(c);
        set.add_range(cp, cp);
        return set_node(std::move(set));
      }
    }
  }

  // One class member that is a single code point (for ranges), or -1 when the
  // member was a whole category/escape set (added to `set` directly).
  int64_t class_member(SymbolSet& set) {
    const uint32_t c = cps_[pos_++];
    if (c != '\\') return literal(c);
    if (at_end()) fail("trailing backslash in class");
    const uint32_t e = cps_[pos_++];
    if (e == 's') {
      add_whitespace(set);
      return -1;
    }
    if (e == 'd') {
      set.add_range('0', '9');
      return -1;
    }
    if (e == 'p') {
      if (re_.view_ != SymbolView::Collapsed) fail("internal: \\p in wide view");
      add_category(set, parse_category());
      return -1;
    }
    const int64_t cp = simple_escape(e);
    if (cp < 0) fail("unsupported escape in class");
    return cp;
  }

  std::unique_ptr<Node> parse_class() {
    SymbolSet set;
    if (peek() == '^') {
      set.negated = true;
      ++pos_;
    }
    while (true) {
      if (at_end()) fail("unterminated character class");
      if (peek() == ']') {
        ++pos_;
        break;
      }
      const int64_t first = class_member(set);
      if (first < 0) continue;
      if (!at_end() && peek() == '-' && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != ']') {
        ++pos_;
        const int64_t last = class_member(set);
        if (last < 0) fail("range ending in a class escape");
        if (last < first) fail("reversed range");
        set.add_range(static_cast<uint32_t>(first), static_cast<uint32_t>(last));
      } else {
        set.add_range(static_cast<uint32_t>(first), static_cast<uint32_t>(first));
      }
    }
    return set_node(std::move(set));
  }

  Regex& re_;
  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
};

namespace {

// Symbols (< 256) that can begin a match of a node, and whether it can
// match the empty string. Lookahead and anchors count as empty: that keeps
// the set a superset of the true first symbols, which is all filtering needs.
struct FirstInfo {
  SymbolSet first;
  bool nullable = false;
};

}  // namespace

static FirstInfo first_info(const Regex::Node& node, const std::vector<SymbolSet>& sets);

Regex::Regex(std::string_view pattern_utf8) : pattern_(pattern_utf8) {
  view_ = pattern_.find("\\p{") != std::string::npos ? SymbolView::Collapsed : SymbolView::Wide;
  Parser parser(*this, unicode::decode_utf8(pattern_));
  const std::unique_ptr<Node> root = parser.parse();
  emit(*root);
  program_.push_back(Inst{Op::Match});
  while (!pending_looks_.empty()) {
    const auto [node, index] = pending_looks_.back();
    pending_looks_.pop_back();
    program_[index].x = static_cast<int32_t>(program_.size());
    emit(*node);
    program_.push_back(Inst{Op::Match});
  }
  trailing_run_ = program_.size() >= 3 && program_[0].op == Op::Run && program_[0].min >= 1 &&
                  program_[0].max == kUnbounded && program_[1].op == Op::AssertEnd && program_[2].op == Op::Match;
  const FirstInfo info = first_info(*root, sets_);
  first_any_ = info.nullable;
  first_ = info.first;

  std::vector<BranchFirst> first(program_.size());
  std::vector<uint8_t> state(program_.size(), 0);
  split_x_first_.assign(program_.size(), BranchFirst{});
  split_y_first_.assign(program_.size(), BranchFirst{});
  for (size_t pc = 0; pc < program_.size(); ++pc) {
    if (program_[pc].op != Op::Split) continue;
    split_x_first_[pc] = first_of(program_[pc].x, first, state);
    split_y_first_[pc] = first_of(program_[pc].y, first, state);
  }
}

Regex::BranchFirst Regex::first_of(int32_t pc, std::vector<BranchFirst>& first, std::vector<uint8_t>& state) const {
  if (state[pc] == 2) return first[pc];
  BranchFirst any;
  any.any = true;
  if (state[pc] == 1) return any;  // a loop back to here: no symbol consumed yet on it, so anything may follow
  state[pc] = 1;
  BranchFirst out;
  const Inst& in = program_[pc];
  auto add_set = [&](const SymbolSet& set) {
    for (uint32_t v = 0; v < 256; ++v) {
      if (set.contains(v)) out.low[v >> 6] |= uint64_t{1} << (v & 63);
    }
  };
  auto add = [&](const BranchFirst& other) {
    out.any = out.any || other.any;
    for (size_t w = 0; w < 4; ++w) out.low[w] |= other.low[w];
  };
  switch (in.op) {
    case Op::Set:
      add_set(sets_[in.x]);
      break;
    case Op::Run:
      add_set(sets_[in.x]);
      if (in.min == 0) add(first_of(pc + 1, first, state));
      break;
    case Op::Split:
      add(first_of(in.x, first, state));
      add(first_of(in.y, first, state));
      break;
    case Op::Jump:
      add(first_of(in.x, first, state));
      break;
    case Op::Match:
    case Op::AssertBegin:
    case Op::AssertEnd:
    case Op::Look:
      out = any;
      break;
  }
  state[pc] = 2;
  first[pc] = out;
  return out;
}

static bool node_nullable(const Regex::Node& node, const std::vector<SymbolSet>& sets) {
  return first_info(node, sets).nullable;
}

static FirstInfo first_info(const Regex::Node& node, const std::vector<SymbolSet>& sets) {
  using Kind = Regex::Node::Kind;
  FirstInfo info;
  switch (node.kind) {
    case Kind::Set: {
      const SymbolSet& s = sets[node.set];
      for (uint32_t v = 0; v < 256; ++v) {
        if (s.contains(v)) info.first.add_range(v, v);
      }
      return info;
    }
    case Kind::Concat:
      info.nullable = true;
      for (const auto& kid : node.kids) {
        const FirstInfo k = first_info(*kid, sets);
        for (int w = 0; w < 4; ++w) info.first.low[w] |= k.first.low[w];
        if (!k.nullable) {
          info.nullable = false;
          break;
        }
      }
      return info;
    case Kind::Alt:
      for (const auto& kid : node.kids) {
        const FirstInfo k = first_info(*kid, sets);
        for (int w = 0; w < 4; ++w) info.first.low[w] |= k.first.low[w];
        info.nullable = info.nullable || k.nullable;
      }
      return info;
    case Kind::Repeat: {
      info = first_info(*node.kids[0], sets);
      info.nullable = info.nullable || node.min == 0;
      return info;
    }
    case Kind::Look:
    case Kind::Begin:
    case Kind::End:
      info.nullable = true;
      return info;
  }
  return info;
}

void Regex::emit(const Node& node) {
  using Kind = Node::Kind;
  switch (node.kind) {
    case Kind::Set:
      program_.push_back(Inst{Op::Set, false, node.set});
      return;
    case Kind::Concat:
      for (const auto& kid : node.kids) emit(*kid);
      return;
    case Kind::Alt: {
      std::vector<size_t> exits;
      for (size_t i = 0; i < node.kids.size(); ++i) {
        const bool last = i + 1 == node.kids.size();
        size_t split = 0;
        if (!last) {
          split = program_.size();
          program_.push_back(Inst{Op::Split, false, static_cast<int32_t>(split + 1), 0});
        }
        emit(*node.kids[i]);
        if (!last) {
          exits.push_back(program_.size());
          program_.push_back(Inst{Op::Jump});
          program_[split].y = static_cast<int32_t>(program_.size());
        }
      }
      for (size_t e : exits) program_[e].x = static_cast<int32_t>(program_.size());
      return;
    }
    case Kind::Repeat: {
      const Node& kid = *node.kids[0];
      if (kid.kind == Kind::Set) {
        Inst run{Op::Run, false, kid.set};
        run.min = node.min;
        run.max = node.max;
        program_.push_back(run);
        return;
      }
      if (node.max == kUnbounded && node_nullable(kid, sets_)) {
        syntax_error(pattern_, "unbounded repetition of something that can match empty");
      }
      for (uint32_t i = 0; i < node.min; ++i) emit(kid);
      if (node.max == kUnbounded) {
        const size_t loop = program_.size();
        program_.push_back(Inst{Op::Split, false, static_cast<int32_t>(loop + 1), 0});
        emit(kid);
        program_.push_back(Inst{Op::Jump, false, static_cast<int32_t>(loop)});
        program_[loop].y = static_cast<int32_t>(program_.size());
        return;
      }
      std::vector<size_t> splits;
      for (uint32_t i = node.min; i < node.max; ++i) {
        splits.push_back(program_.size());
        program_.push_back(Inst{Op::Split, false, static_cast<int32_t>(program_.size() + 1), 0});
        emit(kid);
      }
      for (size_t s : splits) program_[s].y = static_cast<int32_t>(program_.size());
      return;
    }
    case Kind::Look:
      pending_looks_.emplace_back(node.kids[0].get(), static_cast<int32_t>(program_.size()));
      program_.push_back(Inst{Op::Look, node.negate, -1});
      return;
    case Kind::Begin:
      program_.push_back(Inst{Op::AssertBegin});
      return;
    case Kind::End:
      program_.push_back(Inst{Op::AssertEnd});
      return;
  }
}

bool Regex::run(int32_t start_pc, const uint32_t* symbols, size_t begin, size_t end, size_t start_pos,
                size_t& match_end, RegexScratch& scratch) const {
  auto& stack = scratch.stack;
  const size_t base = stack.size();
  stack.push_back({start_pc, 0, start_pos, 0});
  while (stack.size() > base) {
    RegexScratch::Frame frame = stack.back();
    stack.pop_back();
    int32_t pc = frame.pc;
    size_t pos = frame.pos;
    if (frame.kind == 1) {
      // Give back one more symbol of a greedy run and resume after it.
      pos = frame.pos - 1;
      if (pos > frame.min_pos) stack.push_back({pc, 1, pos, frame.min_pos});
    }
    while (true) {
      const Inst& in = program_[pc];
      bool ok = true;
      if (++scratch.steps > scratch.step_limit) {
        throw InvalidArgument(format_where("tokenizer", "the pre-tokenizer pattern needs too much backtracking on this "
                                                        "text (pattern '" + pattern_ + "')"));
      }
      switch (in.op) {
        case Op::Set:
          ok = pos < end && sets_[in.x].contains(symbols[pos]);
          if (ok) {
            ++pos;
            ++pc;
          }
          break;
        case Op::Run: {
          const SymbolSet& set = sets_[in.x];
          const size_t limit = in.max == kUnbounded || end - pos < in.max ? end : pos + in.max;
          size_t p = pos;
          while (p < limit && set.contains(symbols[p])) ++p;
          if (p - pos < in.min) {
            ok = false;
            break;
          }
          if (p > pos + in.min) stack.push_back({pc + 1, 1, p, pos + in.min});
          pos = p;
          ++pc;
          break;
        }
        case Op::Split: {
          // A branch whose first symbol cannot be this one fails on it at
          // once: skip it (same result, no frame pushed and popped).
          const bool at_symbol = pos < end;
          const bool x_may = !at_symbol || split_x_first_[pc].may_start(symbols[pos]);
          const bool y_may = !at_symbol || split_y_first_[pc].may_start(symbols[pos]);
          if (!x_may) {
            pc = in.y;
            ok = y_may;
            break;
          }
          if (y_may) stack.push_back({in.y, 0, pos, 0});
          pc = in.x;
          break;
        }
        case Op::Jump:
          pc = in.x;
          break;
        case Op::Match:
          match_end = pos;
          stack.resize(base);
          return true;
        case Op::AssertBegin:
          ok = pos == begin;
          ++pc;
          break;
        case Op::AssertEnd:
          ok = pos == end;
          ++pc;
          break;
        case Op::Look: {
          size_t ignored = 0;
          const bool matched = run(in.x, symbols, begin, end, pos, ignored, scratch);
          ok = matched != in.negate;
          ++pc;
          break;
        }
      }
      if (!ok) break;
    }
  }
  return false;
}

bool Regex::search(const uint32_t* symbols, size_t begin, size_t end, size_t from, size_t& match_begin,
                   size_t& match_end, RegexScratch& scratch) const {
  if (trailing_run_) {
    // Leftmost start s >= from with symbols[s, end) all in the set.
    const SymbolSet& set = sets_[program_[0].x];
    size_t s = end;
    while (s > from && set.contains(symbols[s - 1])) --s;
    if (end - s < program_[0].min) return false;
    match_begin = s;
    match_end = end;
    return true;
  }
  for (size_t start = from; start < end; ++start) {
    const uint32_t s = symbols[start];
    if (!first_any_ && s < 256 && !first_.contains(s)) continue;
    size_t e = 0;
    if (run(0, symbols, begin, end, start, e, scratch) && e > start) {
      match_begin = start;
      match_end = e;
      return true;
    }
  }
  return false;
}

}  // namespace muser::pretok
