// multinomial on CUDA tensors (device_ops.h): the probabilities and uniforms
// stay on the device. A row pass checks the weights (one 8-byte read of the
// worst status per call; on bad input the CPU kernel reruns the rows up to the
// first bad one to raise its own error), then with replacement a search per
// sample through the row's running sums, without replacement the race keys
// and argsort's first num_samples (ties to the lower category), as the CPU
// kernel (runtime/src/ops/sort.cpp) draws.
#include <algorithm>
#include <vector>

#include "kernels/cuda/device_ops.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/module.h"
#include "kernels/cuda/stream.h"
#include "kiln/attrs.h"
#include "kiln/error.h"
#include "kiln/functional.h"
#include "kiln/op_table.h"
#include "kiln/tensor.h"
#include "ops/sample_rule.h"

namespace kiln::cuda {
namespace {

CUdeviceptr addr(const Tensor& t) {
  return reinterpret_cast<CUdeviceptr>(t.data_ptr());
}

// The CPU kernel over rows [0, bad] of the operands: it raises the error its
// own draw would (the device found row `bad` to be the first bad one).
[[noreturn]] void raise_cpu_error(const Tensor& probs, const Tensor& u, const Attrs& attrs,
                                  int64_t bad) {
  const bool two_d = probs.dim() == 2;
  const Tensor p = (two_d ? probs.narrow(0, 0, bad + 1) : probs).cpu();
  const Tensor uc = (two_d ? u.narrow(0, 0, bad + 1) : u).cpu();
  Dims shape = p.shape();
  shape.back() = attrs.i("num_samples");
  Tensor out[] = {make_tensor(shape, DType::i64, Device::cpu())};
  const Tensor in[] = {p, uc};
  op_info(OpId::multinomial).kernel(std::span<const Tensor>(in), attrs, std::span<Tensor>(out));
  KILN_CHECK(false, "[multinomial] the device found row ", bad,
             " of the probabilities invalid but the CPU accepts it (shape ", probs.shape(), ")");
}

}  // namespace

void device_multinomial(const Tensor& probs0, const Tensor& u0, const Attrs& attrs,
                        const Tensor& out) {
  if (out.numel() == 0) return;
  const Tensor probs = probs0.contiguous(), u = u0.contiguous();
  const bool repl = attrs.b("replacement");
  const int device = out.device().index;
  long long len = probs.size(-1), rows = probs.numel() / len, n = attrs.i("num_samples");
  const std::string dt = dtype_name(probs.dtype());
  const Tensor status = make_tensor({rows}, DType::i64, out.device());
  // The running sums (with replacement) or the race keys (without): [rows, len].
  const Tensor sums = make_tensor(probs.shape(), DType::f64, out.device());
  const Tensor last = make_tensor({repl ? rows : 1}, DType::i64, out.device());
  CUdeviceptr ps = addr(status), pc = addr(sums), pl = addr(last), pp = addr(probs), pu = addr(u);
  const std::string rows_sym = str("kiln_multinomial_rows_", repl ? "repl_" : "", dt);
  std::vector<void*> row_params = {&ps, &pc, &pl, &pp, &rows, &len, &n};
  launch_printed([&] { return print_multinomial_rows(probs.dtype(), repl, rows_sym); }, rows_sym,
                 device, rows, row_params);
  const int64_t worst = kiln::amax(status).to_vector<int64_t>()[0];
  if (worst > 0) raise_cpu_error(probs, u, attrs, rows - worst);
  CUdeviceptr po = addr(out);
  if (repl) {
    long long count = rows * n;
    const std::string sym = "kiln_multinomial_draw";
    std::vector<void*> params = {&po, &pc, &pl, &pu, &count, &len, &n};
    launch_printed([&] { return print_multinomial_draw(sym); }, sym, device, count, params);
    return;
  }
  long long count = rows * len;
  const std::string sym = str("kiln_race_keys_", dt);
  std::vector<void*> key_params = {&pc, &pu, &pp, &count};
  launch_printed(
      [&] { return str(ops::race_log_source(), "\n", print_race_keys(probs.dtype(), sym)); }, sym,
      device, count, key_params);
  device_argsort(sums, Attrs().set("dim", int64_t{-1}).set("descending", true).set("k", n), out);
}

}  // namespace kiln::cuda
