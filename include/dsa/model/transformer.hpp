// dsa::model::transformer<cpu_backend>: the reference DeepSeek-V3.2 forward pass on the CPU
// (the class is dsa/model/basic_transformer.hpp, the same for every backend).
//
//   auto m = dsa::model::transformer<dsa::cpu_backend>::load("DeepSeek-V3.2/", dsa::cpu_backend{16});
//   auto seq = m.new_sequence(4096);
//   std::vector<float> logits = m.forward(seq, prompt);       // prefill: logits of the last token
//   logits = m.forward(seq, std::span(&next, 1));             // decode one token
//
// This header brings what the CPU needs: the CPU implementations of the ops the layers call and
// backend_resources<cpu_backend>, which reads the host weights (views into the memory-mapped
// checkpoint), packed for the CPU kernels unless the backend says otherwise
// (cpu_backend::pack_fp8_weights). Part of the dsa::model target.
#pragma once

#include <memory>

#include "dsa/core/backend.hpp"
#include "dsa/core/config.hpp"
#include "dsa/core/tensor_view.hpp"
#include "dsa/core/types.hpp"
#include "dsa/model/basic_transformer.hpp"
#include "dsa/model/sequence.hpp"
#include "dsa/model/weights.hpp"

// The model runs on host memory, so it brings the CPU implementations of the ops it uses.
#include "dsa/cpu/activation.hpp"
#include "dsa/cpu/fp8_quant.hpp"
#include "dsa/cpu/hadamard.hpp"
#include "dsa/cpu/indexer_weights.hpp"
#include "dsa/cpu/kv_cache.hpp"
#include "dsa/cpu/lightning_indexer.hpp"
#include "dsa/cpu/linear.hpp"
#include "dsa/cpu/moe_combine.hpp"
#include "dsa/cpu/moe_routing.hpp"
#include "dsa/cpu/norm.hpp"
#include "dsa/cpu/rope.hpp"
#include "dsa/cpu/sparse_mha_attention.hpp"
#include "dsa/cpu/topk.hpp"

DSA_NAMESPACE_BEGIN
namespace model {

/// Packs the FP8 projections of `w` for the CPU kernels (dsa/cpu/packed_fp8_weight.hpp): all but
/// kv_b_proj, which the decode reads absorbed in bf16 and the prefill in head-group slices.
/// Weights already packed are kept.
inline void pack_fp8_weights(weights& w, const cpu_backend& be) {
  auto pack = [&](linear_weight& lw) {
    if (lw.fp8() && !lw.packed) lw.packed = std::make_shared<const packed_fp8_weight>(pack_fp8_weight(be, lw.q));
  };
  auto pack_mlp = [&](mlp_weights& m) {
    pack(m.gate_proj);
    pack(m.up_proj);
    pack(m.down_proj);
  };
  for (layer_weights& l : w.layers) {
    pack(l.attn.q_a_proj);
    pack(l.attn.q_b_proj);
    pack(l.attn.kv_a_proj_with_mqa);
    pack(l.attn.o_proj);
    pack(l.attn.indexer.wq_b);
    pack(l.attn.indexer.wk);
    if (l.mlp) pack_mlp(*l.mlp);
    if (l.moe) {
      for (mlp_weights& e : l.moe->experts) pack_mlp(e);
      if (l.moe->shared_experts) pack_mlp(*l.moe->shared_experts);
    }
  }
}

template <>
class backend_resources<cpu_backend> {
 public:
  using sequence_type = sequence;

  /// Packs the FP8 weights for the CPU kernels when the backend asks (cpu_backend::pack_fp8_weights).
  backend_resources(weights& w, cpu_backend& be) {
    if (be.pack_fp8_weights) pack_fp8_weights(w, be);
  }

  const layer_weights& layer(const weights& w, index_t l) const { return w.layers[static_cast<std::size_t>(l)]; }
  host_view<const bf16, 2> embed_tokens(const weights& w) const { return w.embed_tokens; }
  host_view<const float, 1> norm(const weights& w) const { return w.norm; }
  host_view<const bf16, 2> lm_head(const weights& w) const { return w.lm_head; }

  static void reserve(sequence& seq, index_t rows, const cpu_backend&) { seq.reserve(rows); }
};

// DSA_EXTERN_CPU_TRANSFORMER: a program of many translation units compiles the CPU forward pass
// and the model's file I/O (dsa/model/io_linkage.hpp) once instead of in each of them. Define it
// everywhere in the program; in one translation unit, built with the same compiler flags, also
// define DSA_CPU_TRANSFORMER_INSTANCE before the includes and write
// `template class dsa::model::transformer<dsa::cpu_backend>;` after this header (dsa's own tests
// and tools do the two in two files, compiled in parallel: instances/cpu_transformer.cpp and
// instances/model_io.cpp).
#ifdef DSA_EXTERN_CPU_TRANSFORMER
extern template class transformer<cpu_backend>;
#endif

}  // namespace model
DSA_NAMESPACE_END
