// The symbolic check of robocache::fuse and robocache::_fuse_backward, shared
// by the CPU, CUDA and Meta kernels: each stream as resample checks it, and
// the streams' agreement.
#include "common.h"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.fuse";

// "linear" from " linear "; inner spaces stay ("li near" is no mode).
std::string trimmed(const std::string& s) {
  const auto begin = s.find_first_not_of(' ');
  if (begin == std::string::npos)
    return std::string();
  return s.substr(begin, s.find_last_not_of(' ') - begin + 1);
}

// lengths as given to fuse: None, or (K, B) int64 with one row per stream;
// returns each stream's (B,) row (validated with that stream's inputs).
std::vector<std::optional<at::Tensor>> lengths_per_stream(const std::optional<at::Tensor>& lengths,
                                                          size_t K) {
  std::vector<std::optional<at::Tensor>> out(K);
  if (!lengths.has_value())
    return out;
  const at::Tensor& len = *lengths;
  ROBOCACHE_CHECK_VALUE(len.dim() == 2 && len.sym_size(0) == int64_t(K), kOp,
                        ": lengths must be (K, B) with one row per stream (K = ", K,
                        "); got shape ", shape_str(len));
  for (size_t k = 0; k < K; ++k)
    out[k] = len.select(0, int64_t(k));
  return out;
}

// modes as given to fuse: one mode for every stream, or K comma-separated modes.
std::vector<Mode> modes_per_stream(c10::string_view modes, size_t K) {
  std::vector<std::string> tokens;
  std::string current;
  for (char c : modes) {
    if (c == ',') {
      tokens.push_back(trimmed(current));
      current.clear();
    } else {
      current += c;
    }
  }
  tokens.push_back(trimmed(current));
  ROBOCACHE_CHECK_VALUE(tokens.size() == 1 || tokens.size() == K, kOp,
                        ": modes must be one mode or one per stream, comma-separated; got ",
                        tokens.size(), " modes ('", std::string(modes), "') for ", K, " streams");
  std::vector<Mode> out(K);
  for (size_t k = 0; k < K; ++k) {
    const size_t j = tokens.size() == 1 ? 0 : k;
    const std::string arg = "modes[" + std::to_string(j) + "]";
    out[k] = parse_mode(tokens[j], ModeSet::Interp, kOp, arg.c_str());
  }
  return out;
}

// K >= 1 streams (check_fuse has rejected none), each as resample's inputs, and their agreement:
// one values dtype, one times dtype, one device, one batch size. Messages name the stream index.
InterpSizes check_streams(at::TensorList values, at::TensorList times,
                          const at::Tensor& query_times,
                          const std::vector<std::optional<at::Tensor>>& lengths) {
  const std::string op = kOp;
  ROBOCACHE_CHECK_VALUE(values.size() == times.size(), op, ": got ", values.size(),
                        " values tensors but ", times.size(), " times tensors");
  ROBOCACHE_CHECK_VALUE(lengths.size() == values.size(), op, ": got ", lengths.size(),
                        " lengths entries for ", values.size(), " streams");
  InterpSizes total{0, 0, 0};
  for (size_t k = 0; k < values.size(); ++k) {
    const std::string where = op + ": stream " + std::to_string(k);
    if (k > 0) {
      ROBOCACHE_CHECK_TYPE(values[k].scalar_type() == values[0].scalar_type(), where,
                           ": values dtype ", values[k].scalar_type(), " differs from stream 0's ",
                           values[0].scalar_type(), "; all streams' values must share one dtype");
      ROBOCACHE_CHECK_TYPE(times[k].scalar_type() == times[0].scalar_type(), where,
                           ": times dtype ", times[k].scalar_type(), " differs from stream 0's ",
                           times[0].scalar_type(), "; all streams' times must share one dtype");
      ROBOCACHE_CHECK_VALUE(values[k].device() == values[0].device(), where, ": values are on ",
                            values[k].device(), " but stream 0's are on ", values[0].device());
    }
    const auto n = check_resample_stream(values[k], times[k], query_times, lengths[k], where);
    if (k == 0) {
      total.B = n.B;
      total.T = n.T;
    } else {
      ROBOCACHE_SYM_CHECK(n.B.sym_eq(total.B), where, ": values has batch size ", n.B,
                          " but stream 0 has ", total.B);
    }
    total.D_total = total.D_total + n.D;
  }
  return total;
}

}  // namespace

FuseChecked check_fuse(at::TensorList values, at::TensorList times, const at::Tensor& query_times,
                       const std::optional<at::Tensor>& lengths, c10::string_view modes) {
  ROBOCACHE_CHECK_VALUE(!values.empty(), kOp, ": needs at least one stream; got an empty list");
  FuseChecked checked;
  checked.lengths = lengths_per_stream(lengths, values.size());
  checked.modes = modes_per_stream(modes, values.size());
  checked.sizes = check_streams(values, times, query_times, checked.lengths);
  return checked;
}

FuseChecked check_fuse_backward(const at::Tensor& grad_out, at::TensorList values,
                                at::TensorList times, const at::Tensor& query_times,
                                const std::optional<at::Tensor>& lengths, c10::string_view modes,
                                size_t num_values_grad, bool query_grad) {
  FuseChecked checked = check_fuse(values, times, query_times, lengths, modes);
  ROBOCACHE_CHECK_VALUE(num_values_grad == values.size(), kOp, ": values_grad has ",
                        num_values_grad, " entries for ", values.size(), " streams");
  const InterpSizes& n = checked.sizes;
  check_grad_out(grad_out, n.B, n.T, n.D_total, kOp);
  check_query_grad(query_times, query_grad, kOp);
  return checked;
}

InterpInputs fuse_inputs(const FuseChecked& checked, at::TensorList values, at::TensorList times,
                         const at::Tensor& query_times, bool host_lengths) {
  const auto& len = checked.lengths;
  for (size_t k = 0; host_lengths && k < len.size(); ++k) {
    if (len[k].has_value()) {
      check_lengths_in_range(*len[k], 1, values[k].size(1), "S",
                             std::string(kOp) + ": stream " + std::to_string(k));
    }
  }
  return prepare_interp_inputs(values, times, query_times, len, checked.modes);
}

}  // namespace robocache
