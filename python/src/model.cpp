// dsa.Transformer (the reference DeepSeek-V3.2 forward pass: _core.Transformer is
// dsa::model::transformer on the CPU backend, _core.CudaTransformer, in a build with CUDA, the same
// pass on the CUDA backend), dsa.Sequence and dsa.CudaSequence, and dsa.validate_model
// (dsa_validate's golden model replay, tools/validate/model_replay.hpp, returning the report as
// data).
#include <nanobind/stl/vector.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common.hpp"
#include "dsa/model/transformer.hpp"
#ifdef DSA_PY_CUDA
#include "dsa/model/cuda/transformer.hpp"  // under DSA_EXTERN_CUDA_TRANSFORMER: dsa_cuda_transformer's instance
#include "validate/cuda_cases.hpp"         // cuda_device_description
#endif
#include "results.hpp"
#include "validate/model_cases.hpp"

#ifdef DSA_PY_CUDA
// A device sequence owns device buffers and moves only; its implicit copy constructor is declared
// (std::vector's) but cannot be instantiated, which nanobind's trait must be told.
template <>
struct nanobind::detail::is_copy_constructible<dsa::model::device_sequence> : std::false_type {};
#endif

namespace dsa_py {
namespace {

using cpu_transformer = dsa::model::transformer<dsa::cpu_backend>;

/// A CPU transformer and the lock that keeps its calls one at a time (the GIL is released while
/// they run, and a transformer's phase times and decode weights are per instance).
class py_transformer {
 public:
  using model_type = cpu_transformer;
  explicit py_transformer(cpu_transformer m) : model_(std::move(m)) {}
  const cpu_transformer& model() const { return model_; }

  /// f(model) without the GIL, under the lock.
  template <class F>
  auto run(std::string_view, F&& f) {
    nogil release;
    std::lock_guard<std::mutex> lock(mutex_);
    return f(model_);
  }

 private:
  cpu_transformer model_;
  std::mutex mutex_;
};

#ifdef DSA_PY_CUDA
using cuda_transformer = dsa::model::transformer<dsa::cuda_backend>;

/// A CUDA transformer on one device and a stream of its own, with the same lock. Every call makes
/// its device current for the call (Python threads may have switched devices between calls),
/// and so does the destructor, which frees the weights and handles before the stream.
class py_cuda_transformer {
 public:
  using model_type = cuda_transformer;
  py_cuda_transformer(const std::filesystem::path& dir, int device, dsa::index_t num_layers,
                      dsa::cuda_kernel_path kernels)
      : device_(device) {
    const device_scope scope("Transformer.load", device_);
    DSA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    dsa::cuda_backend be{};
    be.stream = stream_;
    be.kernels = kernels;
    try {
      model_.emplace(cuda_transformer::load(dir, be, num_layers));
    } catch (...) {
      (void)cudaStreamDestroy(stream_);
      throw;
    }
  }
  py_cuda_transformer(const py_cuda_transformer&) = delete;
  py_cuda_transformer& operator=(const py_cuda_transformer&) = delete;
  ~py_cuda_transformer() {
    try {
      const device_scope scope("Transformer", device_);
      model_.reset();
      (void)cudaStreamDestroy(stream_);
    } catch (...) {  // a destructor cannot report; the process is losing its device anyway
    }
  }

  const cuda_transformer& model() const { return *model_; }
  int device() const { return device_; }

  template <class F>
  auto run(std::string_view op, F&& f) {
    nogil release;
    std::lock_guard<std::mutex> lock(mutex_);
    const device_scope scope(op, device_);
    return f(*model_);
  }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  std::optional<cuda_transformer> model_;
  std::mutex mutex_;
};
#endif

template <class T>
nb::ndarray<nb::numpy, T> numpy_of(std::vector<T>&& v, std::initializer_list<size_t> shape) {
  auto* owned = new std::vector<T>(std::move(v));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(owned->data(), shape, owner);
}

/// One layer's trace, copied out of the observer's views (valid during the call only).
struct trace_copy {
  dsa::index_t layer = 0, start = 0, rows = 0, k = 0, hidden = 0, experts_per_token = 0;
  std::vector<std::int32_t> topk, experts;
  std::vector<std::uint16_t> ffn_out, residual;  // bf16 bits
};

template <class T, class U>
void copy_rows(const dsa::host_view<const T, 2>& v, std::vector<U>& dst) {
  static_assert(sizeof(T) == sizeof(U));
  const dsa::index_t r = v.extent(0), c = v.extent(1);
  dst.resize(static_cast<std::size_t>(r * c));
  for (dsa::index_t i = 0; i < r; ++i) {
    if (c > 0) std::memcpy(&dst[static_cast<std::size_t>(i * c)], v.row(i), sizeof(T) * static_cast<std::size_t>(c));
  }
}

std::vector<std::int64_t> token_vector(nb::handle tokens) {
  constexpr std::string_view op = "Transformer.forward";
  const ro_array a = input_array(tokens, op, "tokens");
  const host_place p{op, {}};  // token ids are read on the host: a CUDA tensor is an error
  std::vector<std::int64_t> ids;
  if (dt::i64(a.dtype())) {
    const auto v = view_of<const std::int64_t, 1>(p, a, "tokens");
    ids.assign(v.data_handle(), v.data_handle() + v.extent(0));
  } else if (dt::i32(a.dtype())) {
    const auto v = view_of<const std::int32_t, 1>(p, a, "tokens");
    ids.assign(v.data_handle(), v.data_handle() + v.extent(0));
  } else {
    dsa::fail(op, "tokens.dtype", dtype_name(a.dtype()), "int64 or int32 token ids");
  }
  return ids;
}

template <class T>
nb::object forward(T& t, typename T::model_type::sequence_type& seq, nb::handle tokens, dsa::index_t max_chunk,
                   bool trace, bool propagate_nonfinite) {
  const std::vector<std::int64_t> ids = token_vector(tokens);
  std::vector<trace_copy> traces;
  dsa::model::forward_options opt;
  opt.max_chunk = max_chunk;
  if (propagate_nonfinite) opt.on_nonfinite = dsa::model::nonfinite_policy::propagate;
  if (trace) {
    opt.observer = [&](const dsa::model::layer_trace& tr) {
      trace_copy c;
      c.layer = tr.layer;
      c.start = tr.start;
      c.rows = tr.topk.extent(0);
      c.k = tr.topk.extent(1);
      c.hidden = tr.ffn_out.extent(1);
      c.experts_per_token = tr.experts.extent(1);
      copy_rows(tr.topk, c.topk);
      copy_rows(tr.experts, c.experts);
      copy_rows(tr.ffn_out, c.ffn_out);
      copy_rows(tr.residual, c.residual);
      traces.push_back(std::move(c));
    };
  }
  std::vector<float> logits =
      t.run("Transformer.forward", [&](auto& model) { return model.forward(seq, std::span<const std::int64_t>(ids), opt); });
  const size_t vocab = logits.size();
  nb::object out = nb::cast(numpy_of(std::move(logits), {vocab}));
  if (!trace) return out;
  nb::list layers;
  for (trace_copy& c : traces) {
    nb::dict d;
    d["layer"] = c.layer;
    d["start"] = c.start;
    const auto rows = static_cast<size_t>(c.rows);
    d["topk"] = numpy_of(std::move(c.topk), {rows, static_cast<size_t>(c.k)});
    d["experts"] = numpy_of(std::move(c.experts), {c.experts_per_token ? rows : 0, static_cast<size_t>(c.experts_per_token)});
    d["ffn_out"] = numpy_of(std::move(c.ffn_out), {rows, static_cast<size_t>(c.hidden)});
    d["residual"] = numpy_of(std::move(c.residual), {rows, static_cast<size_t>(c.hidden)});
    layers.append(d);
  }
  return nb::make_tuple(out, layers);
}

// The batched forward: each sequence's tokens appended in one call (dsa::model::transformer's
// forward(batch)); returns a list of float32 logits arrays, one per sequence.
template <class T>
nb::list forward_batch(T& t, nb::list seqs, nb::list tokens, dsa::index_t max_chunk, bool all_logits,
                       bool propagate_nonfinite) {
  using model_type = typename T::model_type;
  constexpr std::string_view op = "Transformer.forward_batch";
  const std::size_t n = nb::len(seqs);
  if (nb::len(tokens) != n) {
    dsa::fail(op, "len(tokens)", nb::len(tokens), std::to_string(n) + " (one token array per sequence)");
  }
  std::vector<std::vector<std::int32_t>> ids(n);
  std::vector<typename model_type::batch_entry> batch(n);
  for (std::size_t i = 0; i < n; ++i) {
    typename model_type::sequence_type* seq = nullptr;
    if (!nb::try_cast(seqs[i], seq) || seq == nullptr) {
      dsa::fail(op, "seqs[" + std::to_string(i) + "]", dsa::quoted(nb::str(nb::type_name(seqs[i].type())).c_str()),
                "a sequence of this transformer (Transformer.new_sequence)");
    }
    // Token ids as int32 (the library checks each against the vocabulary before anything runs).
    for (const std::int64_t id : token_vector(tokens[i])) {
      if (id < 0 || id > std::numeric_limits<std::int32_t>::max()) {
        dsa::fail(op, "tokens[" + std::to_string(i) + "]", id, "token ids in [0, 2^31 - 1]");
      }
      ids[i].push_back(static_cast<std::int32_t>(id));
    }
    batch[i] = {seq, ids[i]};
  }
  dsa::model::forward_options opt;
  opt.max_chunk = max_chunk;
  opt.all_logits = all_logits;
  if (propagate_nonfinite) opt.on_nonfinite = dsa::model::nonfinite_policy::propagate;
  std::vector<std::vector<float>> logits = t.run(
      op, [&](auto& model) { return model.forward(std::span<const typename model_type::batch_entry>(batch), opt); });
  const auto vocab = static_cast<size_t>(t.model().config().vocab_size);
  nb::list out;
  for (std::vector<float>& l : logits) {
    const size_t rows = l.size() / vocab;
    if (all_logits) {
      out.append(nb::cast(numpy_of(std::move(l), {rows, vocab})));
    } else {
      out.append(nb::cast(numpy_of(std::move(l), {vocab})));
    }
  }
  return out;
}

template <class T>
nb::dict phase_times(const T& t) {
  const auto& p = t.model().phase_times();
  nb::dict d;
  d["indexer"] = p.indexer;
  d["topk"] = p.topk;
  d["attention"] = p.attention;
  d["moe"] = p.moe;
  d["other"] = p.other;
  d["total"] = p.total();
  return d;
}

/// The report of a model replay as the Python dict of dsa.validate_model.
nb::dict model_report(const std::string& dir, const std::string& backend, dsa_validate::model_case_result& r) {
  nb::dict d;
  d["model"] = dir;
  d["backend"] = backend;
  d["checks"] = comparison_list(r.result.comparisons);
  d["cosines"] = nb::cast(r.cosines);
  d["argmax_match"] = nb::cast(r.argmax_match);
  d["argmax_got"] = nb::cast(r.argmax_got);
  d["argmax_want"] = nb::cast(r.argmax_want);
  d["topk_agreement"] = nb::cast(r.topk_agreement);
  d["diagnostics"] = nb::cast(r.diagnostics);
  d["outputs"] = output_dict(r.result.outputs);
  int passed = 0, failed = 0;
  for (const auto& c : r.result.comparisons) (c.pass ? passed : failed) += 1;
  d["passed"] = passed;
  d["failed"] = failed;
  d["pass"] = r.result.pass();
  return d;
}

nb::dict validate_model(const std::string& dir, int threads, dsa::index_t max_chunk, bool keep_outputs) {
  const auto be = cpu_backend(threads, "validate_model");
  const std::filesystem::path p = path_arg("validate_model", "dir", dir);
  dsa_validate::model_case_result r;
  {
    nogil release;
    // Without keep_outputs the replay streams its batch rows and keeps no computed tensors.
    r = dsa_validate::run_model_case(be, p, max_chunk, keep_outputs);
  }
  return model_report(dir, cpu_description(be), r);
}

#ifdef DSA_PY_CUDA
// dsa_validate --model DIR --backend cuda: the replay on transformer<cuda_backend> on `device`'s
// default stream, with its own cuBLAS handle.
nb::dict validate_model_cuda(const std::string& dir, int device, const std::string& kernels, dsa::index_t max_chunk,
                             bool keep_outputs) {
  constexpr std::string_view op = "validate_model";
  const dsa::cuda_kernel_path path = kernel_path(op, kernels);
  const std::filesystem::path p = path_arg(op, "dir", dir);
  dsa_validate::model_case_result r;
  std::string backend;
  {
    nogil release;
    const device_scope scope(op, device);
    backend = "cuda (" + dsa_validate::cuda_device_description() + "), " + kernels + " kernels";
    r = dsa_validate::run_model_case(dsa::cuda_backend{nullptr, nullptr, dsa::cuda_linear_path::cublas, path}, p,
                                     max_chunk, keep_outputs);
  }
  return model_report(dir, backend, r);
}
#endif

// dsa_validate's model replay (model_detail::replay_model) of a forward pass written in Python
// (dsa.parallel.Transformer): new_sequence(max_tokens) -> a sequence object, and
// forward(seq, tokens, max_chunk) -> (logits float32 [vocab], [per layer and chunk: {"layer",
// "start", "topk" int32 [t, k], "ffn_out" and "residual" bf16 bits uint16 [t, hidden],
// "experts" int32 [t, top_k]}]), the format of dsa.Transformer.forward(trace=True). Runs with
// the GIL held: the callbacks are Python.
class python_model {
 public:
  using sequence_type = nb::object;
  struct batch_entry {
    sequence_type* seq = nullptr;
    std::span<const std::int32_t> tokens;
  };

  python_model(nb::callable new_sequence, nb::callable forward)
      : new_sequence_(std::move(new_sequence)), forward_(std::move(forward)) {}

  sequence_type new_sequence(dsa::index_t max_tokens) { return new_sequence_(max_tokens); }

  std::vector<std::vector<float>> forward(std::span<const batch_entry> batch, const dsa::model::forward_options& o) {
    std::vector<std::vector<float>> out;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      nb::list tokens;
      for (const std::int32_t t : batch[i].tokens) tokens.append(t);
      const nb::object r = forward_(*batch[i].seq, tokens, o.max_chunk);
      if (!nb::isinstance<nb::tuple>(r) || nb::len(r) != 2) {
        dsa::fail(op, "forward()", nb::type_name(r.type()).c_str(), "a tuple (logits, layer traces)");
      }
      const auto logits = array<float, 1>(r[0], "forward()[0] (logits)");
      out.emplace_back(logits.data(), logits.data() + logits.shape(0));
      for (const nb::handle layer : nb::iter(r[1])) {
        if (!nb::isinstance<nb::dict>(layer)) {
          dsa::fail(op, "forward()[1][...]", nb::type_name(layer.type()).c_str(), "a dict per layer and chunk");
        }
        const nb::dict d = nb::borrow<nb::dict>(layer);
        const auto topk = array<std::int32_t, 2>(d["topk"], "trace['topk']");
        const auto ffn = array<std::uint16_t, 2>(d["ffn_out"], "trace['ffn_out']");
        const auto res = array<std::uint16_t, 2>(d["residual"], "trace['residual']");
        const auto exp = array<std::int32_t, 2>(d["experts"], "trace['experts']");
        // The checks read a row of each per row of topk: every array must have those rows.
        const std::size_t rows = topk.shape(0);
        if (ffn.shape(0) != rows || res.shape(0) != rows || (exp.shape(0) != rows && exp.size() != 0)) {
          dsa::fail(op, "trace rows", "topk " + std::to_string(rows) + ", ffn_out " + std::to_string(ffn.shape(0)) +
                                          ", residual " + std::to_string(res.shape(0)) + ", experts " +
                                          std::to_string(exp.shape(0)),
                    "the same rows (one per token of the chunk; experts may be empty)");
        }
        const auto view = [](const auto& a) {
          using T = std::remove_const_t<std::remove_pointer_t<decltype(a.data())>>;
          using E = std::conditional_t<std::is_same_v<T, std::uint16_t>, dsa::bf16, T>;
          return dsa::host_view<const E, 2>(reinterpret_cast<const E*>(a.data()),
                                            {static_cast<dsa::index_t>(a.shape(0)), static_cast<dsa::index_t>(a.shape(1))});
        };
        o.observer(dsa::model::layer_trace{nb::cast<dsa::index_t>(d["layer"]), nb::cast<dsa::index_t>(d["start"]),
                                           view(topk), view(ffn), view(res), view(exp), static_cast<dsa::index_t>(i)});
      }
    }
    return out;
  }

 private:
  static constexpr std::string_view op = "validate_model_with";

  template <class T, std::size_t R>
  static nb::ndarray<const T, nb::ndim<R>, nb::c_contig, nb::device::cpu> array(nb::handle h, const char* what) {
    nb::ndarray<const T, nb::ndim<R>, nb::c_contig, nb::device::cpu> a;
    if (!nb::try_cast(h, a, false)) {
      dsa::fail(op, what, nb::type_name(h.type()).c_str(),
                std::string("a C-contiguous host array of ") + (std::is_same_v<T, float> ? "float32" :
                std::is_same_v<T, std::uint16_t> ? "uint16 (bf16 bits)" : "int32") + ", rank " + std::to_string(R));
    }
    return a;
  }

  nb::callable new_sequence_, forward_;
};

nb::dict validate_model_with(const std::string& dir, const std::string& backend, nb::callable new_sequence,
                             nb::callable forward, dsa::index_t num_layers, dsa::index_t max_chunk, bool keep_outputs) {
  const std::filesystem::path p = path_arg("validate_model_with", "dir", dir);
  const dsa::safetensors_file exp = dsa::safetensors_file::open(p / "expected.safetensors");
  const dsa::model::config cfg = dsa::model::config::load(p);
  if (num_layers < 1 || num_layers > cfg.num_hidden_layers) {
    dsa::fail("validate_model_with", "num_layers", num_layers,
              "1 to num_hidden_layers = " + std::to_string(cfg.num_hidden_layers));
  }
  python_model m(std::move(new_sequence), std::move(forward));
  auto r = dsa_validate::replay_model(m, exp, cfg, num_layers, max_chunk, keep_outputs);
  return model_report(dir, backend, r);
}

/// dsa.Sequence or dsa.CudaSequence: the caches of one sequence, on the host or on the device.
template <class S>
void bind_sequence(nb::module_& m, const char* name, const char* doc) {
  nb::class_<S>(m, name, doc)
      .def_prop_ro("length", &S::length, "Tokens processed so far (the next token's position).")
      .def_prop_ro("max_tokens", &S::max_tokens, "The most tokens this sequence may hold.")
      .def_prop_ro("cache_bytes", &S::cache_bytes, "Cache bytes allocated.")
      .def("reset", &S::reset, "Forgets every token; the sequence restarts at position 0.")
      .def_prop_ro(
          "first_nonfinite",
          [](const S& s) -> nb::object {
            const auto& site = s.first_nonfinite();
            if (!site) return nb::none();
            nb::dict d;
            d["layer"] = site->layer;
            d["stage"] = dsa::model::to_string(site->stage);
            d["position"] = site->position;
            d["text"] = site->to_string();
            return d;
          },
          "Where this sequence's values first stopped being finite (a dict: layer, stage, position, text), or "
          "None.");
}

/// What _core.Transformer and _core.CudaTransformer share.
template <class T>
void bind_transformer_calls(nb::class_<T>& c) {
  c.def_prop_ro("config_json", [](const T& t) { return t.model().config().to_json().dump(); })
      .def_prop_ro("num_layers", [](const T& t) { return t.model().num_layers(); })
      .def(
          "new_sequence",
          [](T& t, dsa::index_t max_tokens) {
            return t.run("Transformer.new_sequence", [&](auto& model) { return model.new_sequence(max_tokens); });
          },
          nb::arg("max_tokens"))
      .def("forward", &forward<T>, nb::arg("seq"), nb::arg("tokens"), nb::arg("max_chunk"), nb::arg("trace"),
           nb::arg("propagate_nonfinite"))
      .def("forward_batch", &forward_batch<T>, nb::arg("seqs"), nb::arg("tokens"), nb::arg("max_chunk"),
           nb::arg("all_logits"), nb::arg("propagate_nonfinite"))
      .def_prop_ro("phase_times", &phase_times<T>)
      .def("reset_phase_times",
           [](T& t) { t.run("Transformer.reset_phase_times", [](auto& model) { model.reset_phase_times(); }); });
}

}  // namespace

void bind_model(nb::module_& m) {
  bind_sequence<dsa::model::sequence>(m, "Sequence",
                                      "The KV caches of one sequence of tokens (Transformer.new_sequence).");
  nb::class_<py_transformer> cpu(m, "Transformer");
  cpu.def_static(
         "load",
         [](const std::string& dir, int threads, dsa::index_t num_layers) {
           const auto be = cpu_backend(threads, "Transformer.load");
           const std::filesystem::path p = path_arg("Transformer.load", "dir", dir);
           std::unique_ptr<py_transformer> t;
           {
             nogil release;
             t = std::make_unique<py_transformer>(cpu_transformer::load(p, be, num_layers));
           }
           return t.release();
         },
         nb::arg("dir"), nb::arg("threads"), nb::arg("num_layers"), nb::rv_policy::take_ownership)
      .def_prop_ro("threads", [](const py_transformer& t) { return dsa::cpu_detail::thread_count(t.model().backend()); });
  bind_transformer_calls(cpu);

#ifdef DSA_PY_CUDA
  bind_sequence<dsa::model::device_sequence>(
      m, "CudaSequence", "The KV caches of one sequence of tokens in device memory (Transformer.new_sequence of a "
                         "transformer loaded with device='cuda').");
  nb::class_<py_cuda_transformer> gpu(m, "CudaTransformer");
  gpu.def_static(
         "load",
         [](const std::string& dir, int device, dsa::index_t num_layers, const std::string& kernels) {
           constexpr std::string_view op = "Transformer.load";
           const dsa::cuda_kernel_path path = kernel_path(op, kernels);
           const std::filesystem::path p = path_arg(op, "dir", dir);
           std::unique_ptr<py_cuda_transformer> t;  // its device_scope checks `device`
           {
             nogil release;
             t = std::make_unique<py_cuda_transformer>(p, device, num_layers, path);
           }
           return t.release();
         },
         nb::arg("dir"), nb::arg("device"), nb::arg("num_layers"), nb::arg("kernels"), nb::rv_policy::take_ownership)
      .def_prop_ro("device", &py_cuda_transformer::device)
      .def_prop_ro("kernels",
                   [](const py_cuda_transformer& t) { return dsa::cuda_kernel_path_name(t.model().backend().kernels); });
  bind_transformer_calls(gpu);
#endif

  m.def("validate_model", &validate_model, nb::arg("dir"), nb::arg("threads"), nb::arg("max_chunk"),
        nb::arg("keep_outputs"));
#ifdef DSA_PY_CUDA
  m.def("validate_model_cuda", &validate_model_cuda, nb::arg("dir"), nb::arg("device"), nb::arg("kernels"),
        nb::arg("max_chunk"), nb::arg("keep_outputs"));
#endif
  m.def("validate_model_with", &validate_model_with, nb::arg("dir"), nb::arg("backend"), nb::arg("new_sequence"),
        nb::arg("forward"), nb::arg("num_layers"), nb::arg("max_chunk"), nb::arg("keep_outputs"));

  // Every tensor of a checkpoint (a directory, its index, or one .safetensors file), as the C++
  // loader finds and validates it: (name, shard path, dtype, shape, byte offset in the shard).
  // For a forward pass composed in Python (dsa.parallel) that reads slices of tensors itself,
  // without a second safetensors parser.
  m.def(
      "checkpoint_tensors",
      [](const std::string& path) {
        const dsa::safetensors_checkpoint ck =
            dsa::safetensors_checkpoint::open(path_arg("checkpoint_tensors", "path", path));
        nb::list out;
        for (const std::string_view name : ck.names()) {
          const dsa::safetensors_file& f = ck.shard_of(name);
          const dsa::tensor_info& t = f.at(name);
          nb::list shape;
          for (const dsa::index_t d : t.shape) shape.append(d);
          out.append(nb::make_tuple(std::string(name), f.path().string(), std::string(dsa::dtype_name(t.type)),
                                    nb::tuple(shape), f.data_offset() + t.begin));
        }
        return out;
      },
      nb::arg("path"));

  // config.json as the forward pass reads it (checked, defaults filled in) and what every layer
  // derives from it, as JSON: for a forward pass composed in Python (dsa.parallel) that must
  // read the same numbers as the C++ one, without a second parser.
  m.def(
      "model_settings",
      [](const std::string& dir) {
        const dsa::model::config c = dsa::model::config::load(std::filesystem::path(dir));
        const dsa::model::layer_settings s = dsa::model::checked_layer_settings(c);
        const dsa::moe_routing_config r = dsa::model::moe_routing_config_of(c);
        nlohmann::json j;
        j["config"] = c.to_json();
        j["softmax_scale"] = c.softmax_scale();
        j["act_format"] = s.act_format == dsa::scale_format::ue8m0 ? "ue8m0" : "fp32";
        j["rope"] = {{"dim", s.rope.dim},
                     {"base", s.rope.base},
                     {"factor", s.rope.factor},
                     {"original_max_position", s.rope.original_max_position},
                     {"max_position", s.rope.max_position},
                     {"beta_fast", s.rope.beta_fast},
                     {"beta_slow", s.rope.beta_slow}};
        j["moe"] = {{"top_k", r.top_k},
                    {"n_group", r.n_group},
                    {"topk_group", r.topk_group},
                    {"scoring", r.scoring == dsa::moe_scoring::sigmoid ? "sigmoid" : "softmax"},
                    {"norm_topk_prob", r.norm_topk_prob},
                    {"routed_scaling_factor", r.routed_scaling_factor}};
        return j.dump();
      },
      nb::arg("dir"));
}

}  // namespace dsa_py
