// The ops fuzzer's fp8_linear case (ops_gen.hpp says why it has a translation unit of its own).
#include "ops_gen.hpp"

namespace dsa_fuzz_ops {

void fuzz_fp8_linear(gen& g, index_t t) {
  const index_t in = g.p.ConsumeBool() ? 128 : g.small(8), out = g.small(5);
  auto x = g.values<bf16, 2>({t, in});
  auto w = g.values<fp8_e4m3, 2>({out, in});
  auto ws = g.values<float, 2>({(out + 127) / 128, in / 128});
  auto y = g.output<bf16, 2>({t, out});
  dsa::cpu_backend be = g.backend();
  if (g.p.ConsumeBool()) be.fp8_block_dot = dsa::fp8_dot::fp32;  // both block dots (issue 13)
  dsa::fp8_linear(be, x.view, w.view, ws.view, y.view, static_cast<dsa::scale_format>(g.p.ConsumeIntegralInRange(0, 2)));
}

}  // namespace dsa_fuzz_ops
