"""dsa: DeepSeek Sparse Attention primitives and the reference DeepSeek-V3.2 forward pass.

Every op takes and returns arrays through DLPack: NumPy arrays and PyTorch tensors (CPU; CUDA
tensors too in a build with CUDA, see ``dsa.built_with_cuda()``), allocating outputs in the
inputs' framework and on their device when ``out=`` is not given and writing into ``out=`` in
place when it is. ``threads=`` sets the CPU thread count of one call (``dsa.set_num_threads`` the
default; 0 = every hardware thread); ``stream=`` the CUDA stream of a call on CUDA arrays (torch's
current stream by default); ``kernels=`` (the indexer's scores and sparse MLA attention) the CUDA
backend's fast tensor-core kernels or its exact ones (``dsa.set_cuda_kernels`` the default,
'exact'). ``dsa.cpu_isa`` names the instruction-set level of the CPU kernels the loader chose
for this CPU. With torch tensors (and no ``out=`` or ``stream=``) an op goes through its torch
custom op, ``torch.ops.dsa.<name>`` (``dsa.register_torch_ops``), which torch.compile and CUDA
graphs see. The GIL is released while an op runs. Every error is a ``dsa.Error`` (a
``ValueError``) with the C++ library's message; so is a scalar argument of the wrong type (an
integer is an int or a NumPy integer, never a float, bool or str; a float a finite real number; a
flag a bool). See docs/python.md.
"""

from . import _core
from ._arrays import (Error, built_with_cuda, causal_ranges, cuda_available, cuda_device_count, get_cuda_kernels,
                      get_num_threads, has_ml_dtypes, set_cuda_kernels, set_num_threads)
from .attention import (sparse_mha_attention, sparse_mla_attention, sparse_mla_attention_num_splits,
                        sparse_mla_attention_workspace_size)
from .dense import add_rms_norm, fp8_linear, layer_norm, linear, rms_norm, rope_apply, swiglu
from .indexer import (indexer_kl_loss_dense, indexer_kl_loss_sparse, lightning_indexer_backward, lightning_indexer_scores,
                      lightning_indexer_scores_paged, lightning_indexer_weights)
from .model import CudaSequence, NonFiniteError, NonFiniteWarning, Sequence, Transformer, validate, validate_model
from .moe import moe_combine, moe_route
from .quant import (act_dequant, act_quant, hadamard_transform, indexer_cache_pack, indexer_cache_unpack,
                    kv_cache_fp8_pack, kv_cache_fp8_unpack, weight_dequant, weight_quant)
from .topk import gather_rows, topk_indices, topk_indices_paged
from ._torch_ops import register_torch_ops

__version__ = _core.__version__

#: The instruction-set level of the CPU kernels this process runs: "x86-64", "x86-64-v3" or
#: "x86-64-v4", the libdsa_cpu.so the loader chose for this CPU (docs/python.md, "CPU kernels").
cpu_isa = str(_core.cpu_isa)

#: Whether this build has the CUDA paths (DSA_ENABLE_CUDA=ON at build time); as built_with_cuda().
has_cuda = bool(_core.has_cuda_build)

if "torch" in __import__("sys").modules:  # torch first: torch.ops.dsa exists from here on
    register_torch_ops()

__all__ = [
    "CudaSequence", "Error", "NonFiniteError", "NonFiniteWarning", "Sequence", "Transformer", "act_dequant", "act_quant",
    "add_rms_norm", "built_with_cuda", "causal_ranges", "cpu_isa", "cuda_available", "cuda_device_count", "fp8_linear",
    "gather_rows", "get_cuda_kernels", "get_num_threads", "hadamard_transform", "has_cuda", "has_ml_dtypes", "indexer_cache_pack",
    "indexer_cache_unpack", "indexer_kl_loss_dense", "indexer_kl_loss_sparse", "kv_cache_fp8_pack",
    "kv_cache_fp8_unpack", "layer_norm", "lightning_indexer_backward", "lightning_indexer_scores",
    "lightning_indexer_scores_paged", "lightning_indexer_weights", "linear", "moe_combine", "moe_route",
    "register_torch_ops", "rms_norm", "rope_apply", "set_cuda_kernels", "set_num_threads", "sparse_mha_attention", "sparse_mla_attention",
    "sparse_mla_attention_num_splits", "sparse_mla_attention_workspace_size", "swiglu", "topk_indices",
    "topk_indices_paged", "validate", "validate_model", "weight_dequant", "weight_quant",
]
