"""The DeepSeek-V3.2 forward pass over several ranks (torch.distributed), composed of dsa's ops.

Each rank holds its slice of the checkpoint, read straight from the safetensors shards (never the
whole model), and runs dsa's ops (through ``torch.ops.dsa``) on it, as DeepSeek's reference
``model.py`` splits the model:

- attention heads column-parallel (``q_b_proj`` and ``kv_b_proj`` rows of the rank's heads) and
  ``o_proj`` row-parallel (the columns of those heads), partial outputs summed by an all-reduce;
  ``q_a_proj``, ``kv_a_proj_with_mqa``, the norms and the indexer replicated (every rank keeps the
  whole latent and indexer caches, which are per token, not per head);
- the dense FFN and the shared experts column-parallel (``gate_proj``, ``up_proj``) and
  row-parallel (``down_proj``);
- routed experts sharded: rank r owns experts [r E / W, (r + 1) E / W); the gate and the routing
  are replicated, each rank runs its experts on the tokens routed to them, and one all-reduce sums
  the experts' and the shared experts' partial outputs;
- ``embed_tokens`` and ``lm_head`` vocabulary-parallel: rank r holds rows [r V / W, (r + 1) V / W);
  the embedding is an all-reduce of the rows each rank has, the logits an all-gather.

Partial sums are reduced in fp32 and rounded to bfloat16 once, where the single-process forward
rounds the whole sum once: only the order of the fp32 additions differs. A weight whose slice would
not be whole FP8 scale blocks (a per-rank width that is not a multiple of 128) is replicated
instead (the tiny models' shared expert at W = 2; V3.2's at W = 32). Collectives: ``gloo`` for CPU
tensors, ``nccl`` for CUDA ones, whatever process group the caller initialised.

::

    torch.distributed.init_process_group("gloo")          # torchrun sets rank and world size
    model = dsa.parallel.Transformer.load("models/tiny-random", threads=1)
    seq = model.new_sequence(64)
    logits = model.forward(seq, [1, 2, 3])                 # [vocab] float32 on every rank
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from . import _arrays as A
from . import _core
from ._torch_ops import register_torch_ops

_ST_DTYPES = {  # safetensors dtype: (NumPy element type for reading, torch dtype name)
    "BF16": (np.uint16, "bfloat16"),
    "F8_E4M3": (np.uint8, "float8_e4m3fn"),
    "F32": (np.float32, "float32"),
    "I32": (np.int32, "int32"),
    "I64": (np.int64, "int64"),
}


class Checkpoint:
    """The tensors of a checkpoint, read by row and column slices: only the slice's bytes are read
    (memory-mapped), so a rank never loads the whole model. The shards are found and their
    headers checked by the C++ loader (``_core.checkpoint_tensors``: the same checks as
    ``dsa.Transformer.load``) before anything is read."""

    def __init__(self, path: str) -> None:
        """The checkpoint at `path`: a directory (the shards model.safetensors.index.json names,
        else model.safetensors), its index file, or one .safetensors file."""
        self._tensors: Dict[str, Tuple[str, str, Tuple[int, ...], int]] = {}
        for name, file, dtype, shape, offset in _core.checkpoint_tensors(os.fspath(path)):
            if dtype not in _ST_DTYPES:
                A.fail("parallel.Checkpoint", f"{file}: tensor '{name}' dtype", A.show(dtype),
                       "one of " + ", ".join(_ST_DTYPES))
            self._tensors[name] = (file, dtype, tuple(shape), offset)

    def __contains__(self, name: str) -> bool:
        return name in self._tensors

    def shape(self, name: str) -> Tuple[int, ...]:
        return self._entry(name)[2]

    def _entry(self, name: str):
        if name not in self._tensors:
            A.fail("parallel.Checkpoint", "tensor", A.show(name), "a tensor of the checkpoint")
        return self._tensors[name]

    def read(self, name: str, rows: Optional[Tuple[int, int]] = None, cols: Optional[Tuple[int, int]] = None,
             device: Any = "cpu", expect: Optional[Tuple[int, ...]] = None) -> Any:
        """Tensor `name` (rows [r0, r1) and columns [c0, c1) of a 2-D one when given) as a torch
        tensor on `device`; its whole shape must be `expect` when given (checked before a byte is
        read: a slice of a tensor of another shape would be silently wrong)."""
        import torch
        path, dtype, shape, offset = self._entry(name)
        if expect is not None and shape != tuple(expect):
            A.fail("parallel.Checkpoint", f"tensor '{name}' shape", str(list(shape)), f"{list(expect)} (from config.json)")
        np_type, torch_name = _ST_DTYPES[dtype]
        a = np.memmap(path, dtype=np_type, mode="r", offset=offset, shape=shape) if math.prod(shape) else \
            np.zeros(shape, np_type)
        if rows is not None:
            a = a[rows[0]:rows[1]]
        if cols is not None:
            a = a[:, cols[0]:cols[1]]
        t = torch.from_numpy(np.array(a))  # a copy: the slice's bytes only, writable
        if torch_name == "bfloat16":
            t = t.view(torch.int16).view(torch.bfloat16)
        elif torch_name == "float8_e4m3fn":
            t = t.view(torch.float8_e4m3fn)
        return t.to(device)


class _Linear:
    """A checkpoint linear ``y = x . W^T`` (or a slice of one): fp8_linear for FP8 weights with
    their 128 x 128 block scales, linear for bf16 ones."""

    def __init__(self, ck: Checkpoint, prefix: str, shape: Tuple[int, int], act_format: str, device: Any,
                 rows: Optional[Tuple[int, int]] = None, cols: Optional[Tuple[int, int]] = None) -> None:
        name = prefix + ".weight"
        self.act_format = act_format
        self.fp8 = prefix + ".weight_scale_inv" in ck
        if self.fp8:
            for what, r, n in (("rows", rows, shape[0]), ("columns", cols, shape[1])):
                if r is not None and (r[0] % 128 or (r[1] % 128 and r[1] != n)):
                    A.fail("parallel.Transformer.load", f"{prefix} {what}", f"[{r[0]}, {r[1]})",
                           "a slice of whole 128 x 128 FP8 scale blocks")
            self.q = ck.read(name, rows, cols, device, shape)
            srows = None if rows is None else (rows[0] // 128, -(-rows[1] // 128))
            scols = None if cols is None else (cols[0] // 128, -(-cols[1] // 128))
            self.s = ck.read(prefix + ".weight_scale_inv", srows, scols, device,
                             (-(-shape[0] // 128), -(-shape[1] // 128))).float()
        else:
            self.w = ck.read(name, rows, cols, device, shape)

    def nbytes(self) -> int:
        if self.fp8:
            return self.q.numel() * self.q.element_size() + self.s.numel() * 4
        return self.w.numel() * self.w.element_size()

    def __call__(self, x: Any, out_dtype: str = "bfloat16", threads: Optional[int] = None) -> Any:
        from .dense import fp8_linear, linear
        if self.fp8:
            return fp8_linear(x, self.q, self.s, act_format=self.act_format, out_dtype=out_dtype, threads=threads)
        return linear(x, self.w, out_dtype=out_dtype, threads=threads)

    def rows(self, begin: int, count: int) -> "_Linear":
        """Rows [begin, begin + count) of this weight (begin and count whole FP8 blocks)."""
        r = object.__new__(_Linear)
        r.act_format, r.fp8 = self.act_format, self.fp8
        if self.fp8:
            r.q = self.q[begin:begin + count]
            r.s = self.s[begin // 128:-(-(begin + count) // 128)]
        else:
            r.w = self.w[begin:begin + count]
        return r


def _split(n: int, world: int, rank: int, fp8: bool) -> Optional[Tuple[int, int]]:
    """Rank `rank`'s slice [begin, end) of n rows or columns, or None when n does not split into
    whole parts (whole 128-wide FP8 blocks for FP8 weights): then the weight is replicated."""
    if world == 1 or n % world or (fp8 and (n // world) % 128):
        return None
    part = n // world
    return rank * part, (rank + 1) * part


class _Sequence:
    """One sequence's caches on this rank: per layer the MLA latent rows [max_tokens, kv_lora_rank
    + rope] bfloat16 and the indexer key rows [max_tokens, 132] uint8 (both replicated)."""

    def __init__(self, owner: int, layers: int, max_tokens: int, row: int, device: Any) -> None:
        import torch
        self.owner = owner
        self.max_tokens = max_tokens
        self.length = 0
        self.mla = [torch.zeros(max_tokens, row, dtype=torch.bfloat16, device=device) for _ in range(layers)]
        self.keys = [torch.zeros(max_tokens, int(_core.indexer_cache_row_bytes), dtype=torch.uint8, device=device)
                     for _ in range(layers)]


class Transformer:
    """The V3.2 forward pass of this rank of a torch.distributed process group (module docstring).

    ``load`` reads the rank's slice of the checkpoint; ``forward(seq, tokens)`` is a collective
    (every rank calls it with the same tokens) and returns the float32 logits [vocab] of the last
    token on every rank, as ``dsa.Transformer.forward`` does in one process."""

    def __init__(self) -> None:  # use Transformer.load
        self.weight_bytes = 0

    @classmethod
    def load(cls, dir: str, *, group: Any = None, device: Any = "cpu", threads: Optional[int] = None,
             num_layers: Optional[int] = None) -> "Transformer":
        import torch
        import torch.distributed as dist
        register_torch_ops()
        self = cls()
        self.group = group
        self.world = dist.get_world_size(group) if dist.is_initialized() else 1
        self.rank = dist.get_rank(group) if dist.is_initialized() else 0
        self.device = torch.device(device)
        self.threads = threads
        s = json.loads(_core.model_settings(os.fspath(dir)))
        c = s["config"]
        self.cfg, self.rope, self.moe = c, s["rope"], s["moe"]
        self.act_format, self.softmax_scale = s["act_format"], float(s["softmax_scale"])
        self.eps = float(c["rms_norm_eps"])
        self.num_layers = c["num_hidden_layers"] if num_layers is None else A.int_arg(
            "parallel.Transformer.load", "num_layers", num_layers, 1, c["num_hidden_layers"])
        ck = Checkpoint(os.fspath(dir))
        W, r, dev, fmt = self.world, self.rank, self.device, self.act_format
        V, d = c["vocab_size"], c["hidden_size"]
        fp8 = any(n.endswith(".weight_scale_inv") for n in ck._tensors)
        # Every tensor's whole shape is checked against config.json before its slice is read.

        def vec(name, n):
            return ck.read(name, device=dev, expect=(n,)).float()

        def lin(prefix, shape, rows=None, cols=None):
            w = _Linear(ck, prefix, shape, fmt, dev, rows, cols)
            self.weight_bytes += w.nbytes()
            return w

        def tensor(name, shape, rows=None):
            t = ck.read(name, rows, device=dev, expect=shape)
            self.weight_bytes += t.numel() * t.element_size()
            return t

        self.vocab = _split(V, W, r, False) or (0, V)
        self.vocab_parallel = self.vocab != (0, V)
        self.embed = tensor("model.embed_tokens.weight", (V, d), self.vocab)
        self.lm_head = tensor("model.embed_tokens.weight" if c["tie_word_embeddings"] else "lm_head.weight", (V, d),
                              self.vocab)
        self.norm = vec("model.norm.weight", d)
        H, nope, rope, dv = c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        ql, cl, hi, di = c["q_lora_rank"], c["kv_lora_rank"], c["index_n_heads"], c["index_head_dim"]
        heads = _split(H, W, r, False)
        if heads is not None and fp8 and any((heads[1] - heads[0]) * w % 128 for w in (nope + rope, nope + dv, dv)):
            heads = None
        self.heads = heads or (0, H)
        self.heads_parallel = heads is not None
        h0, h1 = self.heads
        self.layers = []
        for l in range(self.num_layers):
            p = f"model.layers.{l}"
            a, ix = p + ".self_attn", p + ".self_attn.indexer"
            L: Dict[str, Any] = {
                "input_norm": vec(p + ".input_layernorm.weight", d),
                "post_norm": vec(p + ".post_attention_layernorm.weight", d),
                "q_a": lin(a + ".q_a_proj", (ql, d)), "q_norm": vec(a + ".q_a_layernorm.weight", ql),
                "q_b": lin(a + ".q_b_proj", (H * (nope + rope), ql), (h0 * (nope + rope), h1 * (nope + rope))),
                "kv_a": lin(a + ".kv_a_proj_with_mqa", (cl + rope, d)), "kv_norm": vec(a + ".kv_a_layernorm.weight", cl),
                "kv_b": lin(a + ".kv_b_proj", (H * (nope + dv), cl), (h0 * (nope + dv), h1 * (nope + dv))),
                "o": lin(a + ".o_proj", (d, H * dv), None, (h0 * dv, h1 * dv) if self.heads_parallel else None),
                "idx_wq_b": lin(ix + ".wq_b", (hi * di, ql)), "idx_wk": lin(ix + ".wk", (di, d)),
                "idx_k_norm": (vec(ix + ".k_norm.weight", di), vec(ix + ".k_norm.bias", di)),
                "idx_weights": tensor(ix + ".weights_proj.weight", (hi, d)),
            }
            if l >= c["first_k_dense_replace"]:
                E = c["n_routed_experts"]
                experts = _split(E, W, r, False)
                if W > 1 and experts is None:
                    A.fail("parallel.Transformer.load", "world_size", W,
                           f"a divisor of n_routed_experts = {E} (experts are sharded by rank)")
                e0, e1 = experts or (0, E)
                moe_inter = c["moe_intermediate_size"]
                L["experts"] = {e: self._mlp(lin, f"{p}.mlp.experts.{e}", moe_inter, d, fp8, shard=False)
                                for e in range(e0, e1)}
                L["gate"] = tensor(p + ".mlp.gate.weight", (E, d))
                bias = p + ".mlp.gate.e_score_correction_bias"
                L["bias"] = vec(bias, E) if bias in ck else None
                if c["n_shared_experts"]:
                    L["shared"] = self._mlp(lin, p + ".mlp.shared_experts", c["n_shared_experts"] * moe_inter, d, fp8,
                                            shard=True)
            else:
                L["mlp"] = self._mlp(lin, p + ".mlp", c["intermediate_size"], d, fp8, shard=True)
            self.layers.append(L)
        return self

    def _mlp(self, lin: Any, prefix: str, inter: int, d: int, fp8: bool, shard: bool) -> Dict[str, Any]:
        part = _split(inter, self.world, self.rank, fp8) if shard else None
        return {"gate": lin(prefix + ".gate_proj", (inter, d), part), "up": lin(prefix + ".up_proj", (inter, d), part),
                "down": lin(prefix + ".down_proj", (d, inter), None, part), "partial": part is not None}

    # ---- collectives ------------------------------------------------------------------------------

    def _all_reduce(self, x: Any) -> Any:
        import torch.distributed as dist
        if self.world > 1:
            dist.all_reduce(x, group=self.group)
        return x

    def new_sequence(self, max_tokens: int) -> _Sequence:
        c = self.cfg
        max_tokens = A.int_arg("parallel.Transformer.new_sequence", "max_tokens", max_tokens, 1,
                               c["max_position_embeddings"])
        return _Sequence(id(self), self.num_layers, max_tokens, c["kv_lora_rank"] + c["qk_rope_head_dim"], self.device)

    # ---- the forward pass -------------------------------------------------------------------------

    def forward(self, seq: _Sequence, tokens: Any, *, max_chunk: int = 4096, trace: bool = False) -> Any:
        """Appends `tokens` to `seq` (all ranks alike) and returns the last token's logits [vocab]
        float32. A prompt is prefilled in chunks of at most ``max_chunk`` tokens; a chunk of more
        than one token runs the MHA prefill, of one token the absorbed MQA decode, as in the
        single-process forward (whose bits one rank reproduces). With ``trace`` it returns
        ``(logits, layers)``, the layers as ``dsa.Transformer.forward(trace=True)`` gives them
        (NumPy arrays on the host, per layer and chunk)."""
        import torch
        from .model import _tokens
        op = "parallel.Transformer.forward"
        if not isinstance(seq, _Sequence) or seq.owner != id(self):
            A.fail(op, "seq", A.typed(seq), "a sequence made by this transformer's new_sequence()")
        max_chunk = A.int_arg(op, "max_chunk", max_chunk, 1)
        layers: Optional[List[Dict[str, Any]]] = [] if A.flag_arg(op, "trace", trace) else None
        ids = np.asarray(_tokens(tokens, op)).reshape(-1)
        if ids.dtype not in (np.int64, np.int32):
            A.fail(op, "tokens.dtype", str(ids.dtype), "int64 or int32 token ids")
        t = ids.size
        if t < 1 or t > seq.max_tokens - seq.length:
            A.fail(op, "tokens.size", str(t), f"1 to max_tokens - length = {seq.max_tokens - seq.length}")
        bad = np.flatnonzero((ids < 0) | (ids >= self.cfg["vocab_size"]))
        if bad.size:
            A.fail(op, f"tokens[{bad[0]}]", str(ids[bad[0]]), f"a token id in [0, vocab_size = {self.cfg['vocab_size']})")
        ids = torch.as_tensor(ids.astype(np.int64), device=self.device)
        for b in range(0, t, max_chunk):
            logits = self._chunk(seq, ids[b:b + max_chunk], layers)
        return logits if layers is None else (logits, layers)

    def _chunk(self, seq: _Sequence, ids: Any, layers: Optional[List[Dict[str, Any]]]) -> Any:
        import torch
        import torch.distributed as dist
        from . import dense
        t, start = ids.numel(), seq.length
        positions = torch.arange(start, start + t, dtype=torch.int32, device=self.device)
        v0, v1 = self.vocab
        local = torch.where((ids >= v0) & (ids < v1), ids - v0, -1).to(torch.int32)
        h = self._reduced(self._gather_rows(self.embed, local), self.vocab_parallel)
        residual = torch.zeros_like(h)
        for l, L in enumerate(self.layers):
            x = dense.add_rms_norm(h, residual, L["input_norm"], self.eps, threads=self.threads)
            a, topk = self._attention(L, x, positions, seq, l, start, t)
            x = dense.add_rms_norm(a, residual, L["post_norm"], self.eps, threads=self.threads)
            if "gate" in L:
                h, experts = self._moe(L, x)
            else:
                h, experts = self._reduced(self._mlp_forward(L["mlp"], x), L["mlp"]["partial"]), None
            if layers is not None:
                bits = lambda v: v.cpu().view(torch.int16).numpy().view(np.uint16).copy()  # noqa: E731
                layers.append({"layer": l, "start": start, "topk": topk.cpu().numpy().copy(),
                               "experts": np.zeros((0, 0), np.int32) if experts is None else experts.cpu().numpy().copy(),
                               "ffn_out": bits(h), "residual": bits(residual)})
        seq.length += t
        x = dense.add_rms_norm(h[-1:], residual[-1:].clone(), self.norm, self.eps, threads=self.threads)
        logits = dense.linear(x, self.lm_head, out_dtype="float32", threads=self.threads)[0]
        if self.vocab_parallel:
            parts = [torch.empty_like(logits) for _ in range(self.world)]
            dist.all_gather(parts, logits.contiguous(), group=self.group)
            logits = torch.cat(parts)
        return logits

    def _gather_rows(self, src: Any, idx: Any) -> Any:
        from .topk import gather_rows
        return gather_rows(src, idx.view(1, -1), threads=self.threads)[0]

    def _reduced(self, y: Any, partial: bool) -> Any:
        """A row-parallel output: fp32 partial sums reduced over the ranks and rounded once to
        bfloat16 (a replicated one is already whole)."""
        import torch
        if not partial:
            return y.to(torch.bfloat16)
        return self._all_reduce(y.float()).to(torch.bfloat16)

    def _mlp_forward(self, m: Dict[str, Any], x: Any) -> Any:
        """The SwiGLU FFN on x: bf16 when whole, fp32 partial sums when its inter dim is sharded."""
        from .dense import swiglu
        g = swiglu(m["gate"](x, threads=self.threads), m["up"](x, threads=self.threads), threads=self.threads)
        return m["down"](g, out_dtype="float32" if m["partial"] else "bfloat16", threads=self.threads)

    def _moe(self, L: Dict[str, Any], x: Any) -> Tuple[Any, Any]:
        """The MoE block's output and the routed experts [t, top_k] of each token."""
        import torch
        from .dense import linear
        from .moe import moe_route
        t = x.shape[0]
        logits = linear(x, L["gate"], out_dtype="float32", threads=self.threads)
        ids, weights = moe_route(logits, L["bias"], threads=self.threads, **self.moe)
        # This rank's experts, in ascending id as the single-process combine adds them.
        y = torch.zeros(t, x.shape[1], dtype=torch.float32, device=x.device)
        for e, m in L["experts"].items():
            token, slot = (ids == e).nonzero(as_tuple=True)
            if token.numel() == 0:
                continue
            xe = self._gather_rows(x, token.to(torch.int32))
            ye = self._mlp_forward(m, xe)
            y.index_add_(0, token, ye.float() * weights[token, slot][:, None])
        shared = L.get("shared")
        if shared is not None and shared["partial"]:
            y += self._mlp_forward(shared, x)
        self._all_reduce(y)
        if shared is not None and not shared["partial"]:
            y += self._mlp_forward(shared, x).float()
        return y.to(torch.bfloat16), ids

    def _attention(self, L: Dict[str, Any], x: Any, positions: Any, seq: _Sequence, l: int, start: int,
                   t: int) -> Tuple[Any, Any]:
        """The attention block's output and the indexer's selection [t, min(index_topk, end)]."""
        import torch
        from . import dense, quant
        from .attention import sparse_mha_attention
        c, th = self.cfg, self.threads
        h = self.heads[1] - self.heads[0]
        nope, rope, dv, cl = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"], c["kv_lora_rank"]
        dqk, end = nope + rope, start + t
        rope_kw = dict(self.rope)
        rope_kw.pop("dim")
        qr = dense.rms_norm(L["q_a"](x, threads=th), L["q_norm"], self.eps, threads=th)
        q = L["q_b"](qr, threads=th).view(t, h, dqk)
        dense.rope_apply(q[:, :, nope:], positions, layout="interleaved", threads=th, **rope_kw)
        kv = L["kv_a"](x, threads=th)
        latent = dense.rms_norm(kv[:, :cl].contiguous(), L["kv_norm"], self.eps, threads=th)
        c8, cs = quant.act_quant(latent, scale_format=self.act_format, threads=th)
        mla = seq.mla[l]
        mla[start:end, :cl] = quant.act_dequant(c8, cs, dtype="bfloat16", threads=th)
        mla[start:end, cl:] = kv[:, cl:]
        dense.rope_apply(mla[start:end, None, cl:], positions, layout="interleaved", threads=th, **rope_kw)

        topk = self._indexer(L, x, qr, positions, seq, l, start, t, rope_kw)

        cached = mla[:end]
        if t > 1:  # MHA prefill: keys and values of the rank's heads, a group of heads at a time
            per_head = nope + dv
            group = min(128 // math.gcd(128, per_head) if L["kv_b"].fp8 else 1, h)
            latent_rows = cached[:, :cl].contiguous()
            outs = []
            for g0 in range(0, h, group):
                gh = min(group, h - g0)
                kvb = L["kv_b"].rows(g0 * per_head, gh * per_head)(latent_rows, threads=th).view(end, gh, per_head)
                outs.append(sparse_mha_attention(q[:, g0:g0 + gh], kvb[:, :, :nope], cached[:, cl:], kvb[:, :, nope:],
                                                 topk, self.softmax_scale, rounding="bf16", threads=th))
            o = torch.cat(outs, 1).reshape(t, h * dv)
        else:  # absorbed MQA decode over the latent rows, per head through W_UK and W_UV
            w_uk_t, w_uv = self._decode_weights(L, h, nope, dv)
            q_lat = torch.empty(1, h, cl + rope, dtype=torch.bfloat16, device=x.device)
            for hh in range(h):
                q_lat[:, hh, :cl] = dense.linear(q[:, hh, :nope].contiguous(), w_uk_t[hh], threads=th)
            q_lat[:, :, cl:] = q[:, :, nope:]
            lat = cached[:, None, :cl].expand(end, h, cl)
            o_lat = sparse_mha_attention(q_lat, lat, cached[:, cl:], lat, topk, self.softmax_scale,
                                         rounding="bf16_split", threads=th)
            o = torch.cat([dense.linear(o_lat[:, hh].contiguous(), w_uv[hh], threads=th) for hh in range(h)], 1)
        return self._reduced(L["o"](o, out_dtype="float32" if self.heads_parallel else "bfloat16", threads=th),
                             self.heads_parallel), topk

    def _decode_weights(self, L: Dict[str, Any], h: int, nope: int, dv: int):
        """W_UK transposed [h, C, nope] and W_UV [h, dv, C] of the rank's heads, from kv_b_proj in
        bf16 (once per layer, as the single-process decode derives them)."""
        if "w_uk_t" not in L:
            from .quant import weight_dequant
            kvb = L["kv_b"]
            w = weight_dequant(kvb.q, kvb.s, dtype="bfloat16", threads=self.threads) if kvb.fp8 else kvb.w
            w = w.view(h, nope + dv, -1)
            L["w_uk_t"] = [w[hh, :nope].t().contiguous() for hh in range(h)]
            L["w_uv"] = [w[hh, nope:].contiguous() for hh in range(h)]
        return L["w_uk_t"], L["w_uv"]

    def _indexer(self, L: Dict[str, Any], x: Any, qr: Any, positions: Any, seq: _Sequence, l: int, start: int,
                 t: int, rope_kw: Dict[str, Any]) -> Any:
        """The lightning indexer (replicated on every rank): the new keys into the cache, then each
        token's top-k positions over its causal range."""
        import torch
        from . import dense, indexer, quant
        from .topk import topk_indices
        c, th = self.cfg, self.threads
        heads, dim, rope, end = c["index_n_heads"], c["index_head_dim"], c["qk_rope_head_dim"], start + t
        scale = dim ** -0.5
        q = L["idx_wq_b"](qr, threads=th).view(t, heads, dim)
        dense.rope_apply(q[:, :, :rope], positions, layout="half", threads=th, **rope_kw)
        k = dense.layer_norm(L["idx_wk"](x, threads=th), *L["idx_k_norm"], 1e-6, threads=th)
        dense.rope_apply(k[:, None, :rope], positions, layout="half", threads=th, **rope_kw)
        q = quant.hadamard_transform(q.view(t * heads, dim), scale, threads=th)
        k = quant.hadamard_transform(k, scale, threads=th)
        q8, qs = quant.act_quant(q, scale_format=self.act_format, threads=th)
        k8, ks = quant.act_quant(k, scale_format=self.act_format, threads=th)
        quant.indexer_cache_pack(k8, ks.view(t), out=seq.keys[l][start:end], threads=th)
        w = dense.linear(x, L["idx_weights"], out_dtype="float32", threads=th)
        w = indexer.lightning_indexer_weights(w, qs.view(t, heads), heads ** -0.5, scale, threads=th)
        ranges = torch.zeros(t, 2, dtype=torch.int32, device=x.device)
        ranges[:, 1] = positions + 1
        table = torch.zeros(t, 1, dtype=torch.int32, device=x.device)
        scores = indexer.lightning_indexer_scores_paged(q8.view(t, heads, dim), w, seq.keys[l][:end], table, end, ranges,
                                                        n=end, threads=th)
        return topk_indices(scores, min(c["index_topk"], end), ranges, threads=th)


def validate_model(dir: str, *, group: Any = None, device: Any = "cpu", threads: Optional[int] = None,
                   max_chunk: int = 4096, outputs: bool = False) -> Dict[str, Any]:
    """The golden replay of a model directory (config.json, the checkpoint, expected.safetensors)
    by this process group's ranks: ``dsa.validate_model``'s replay and criteria (the same C++
    code judges it: tools/validate/model_replay.hpp) and its report, with this forward pass in
    place of the single-process one. A collective: every rank calls it and gets the same report.
    ``outputs=True`` keeps the computed tensors in the report, as dsa.validate_model does."""
    from .model import _arrays
    op = "parallel.validate_model"
    max_chunk = A.int_arg(op, "max_chunk", max_chunk, 1)
    outputs = A.flag_arg(op, "outputs", outputs)
    model = Transformer.load(dir, group=group, device=device, threads=threads)

    def forward(seq: _Sequence, tokens: List[int], chunk: int) -> Tuple[np.ndarray, List[Dict[str, Any]]]:
        logits, layers = model.forward(seq, tokens, max_chunk=chunk, trace=True)
        return logits.cpu().numpy(), layers

    backend = f"dsa.parallel, {model.world} rank{'s' if model.world > 1 else ''}, {device}"
    report = _core.validate_model_with(os.fspath(dir), backend, model.new_sequence, forward, model.num_layers,
                                       max_chunk, outputs)
    report["outputs"] = _arrays(report["outputs"])
    return report
