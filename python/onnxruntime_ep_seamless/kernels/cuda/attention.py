"""Attention on CUDA. ONNX Attention (opsets 23-24), composed of our kernels: batched products for Q K^T and
P V (matmul.batched_product), broadcast adds for the masks, the softmax row kernel. float16/bfloat16
inputs compute in float32 and round the outputs once, as the CPU kernel (kernels/cpu/attention.py).
LinearAttention (opset 27): attention.cu's recurrence, token by token (decode steps, short prompts) or in
chunks. com.microsoft GroupQueryAttention and RotaryEmbedding, ONNX RotaryEmbedding-23 (native/cuda/attention.cu), and
MultiHeadAttention (composed, as ONNX Attention, in float32). Semantics and run-time checks are shared with the
CPU kernels (kernels/cpu/attention.py)."""

import numpy as np

from ...runtime.cuda import DeviceTensor
from ...runtime.cuda_args import struct_arg, lib as codes
from .. import checks
from ..checks import InvalidArgument, gpu_check_fields
from ..cpu import attention as cpu_attention
from ..cpu.attention import (attention_shapes, check_attention, check_linear_attention, check_mha, gqa_config_problem,
                             gqa_layout, linear_attention_geometry, mha_shapes, mrotary_geometry,
                             shape_or_none)
from ..registry import FUSED_DOMAIN, kernel
from .elementwise import (ADD, COMPARE, DIV_BY, GPU_FLOATS, LOGIC, MUL_BY, SUFFIX, Scratch, binary, cast_to, compare,
                          device_scalar, logic, unary, where)
from .matmul import batched_product
from .reduction import ZERO_MASKED_ROWS, softmax_rows
from .shape import concat, permuted

GREATER_OR_EQUAL, LESS_OR_EQUAL = (COMPARE[op][0] for op in ("GreaterOrEqual", "LessOrEqual"))

F32 = np.dtype(np.float32)
TANH = 2  # UnaryOp


def _check(node, graph):
    if len(node.inputs) > 6 and node.inputs[6]:
        return "nonpad_kv_seqlen is not supported on CUDA"
    return check_attention(node, graph)


@kernel("Attention", since=23, until=24, types=GPU_FLOATS, device="cuda", check=_check)
def attention(rt, stream, Q, K, V, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *,
              is_causal=0, kv_num_heads=0, q_num_heads=0, qk_matmul_output_mode=0, scale=None, softcap=0.0,
              softmax_precision=1, _num_outputs=1):
    scratch = []

    def keep(t):
        scratch.append(t)
        return t

    three_d = len(Q.shape) == 3
    attention_shapes(Q, K, V, past_key, past_value, q_num_heads, kv_num_heads)
    if three_d:  # (B, S, N*H) -> (B, N, S, H)
        def heads(x, n):
            view = DeviceTensor(x.ptr, (x.shape[0], x.shape[1], n, x.shape[2] // n), x.dtype)
            return keep(permuted(rt, stream, view, [0, 2, 1, 3]))
        q, k, v = heads(Q, q_num_heads), heads(K, kv_num_heads), heads(V, kv_num_heads)
    else:
        q, k, v = Q, K, V
    if past_key is not None:  # present = past ++ new, in the input type
        k, v = (keep(concat(rt, stream, p, x, axis=2)[0]) for p, x in ((past_key, k), (past_value, v)))
    present_k, present_v = k, v
    b, nq, s, h = q.shape
    nkv, t, hv = k.shape[1], k.shape[2], v.shape[3]
    q, k, v = (keep(cast_to(rt, stream, x, F32)) if x.dtype != F32 else x for x in (q, k, v))
    if nq != nkv:  # grouped heads: query head i reads key/value head i // (nq / nkv)
        k, v = (keep(_repeat_heads(rt, stream, x, nq // nkv)) for x in (k, v))
    sm_scale = float(scale) if scale is not None else 1.0 / float(np.sqrt(np.float32(h)))
    scores = keep(rt.alloc((b, nq, s, t), F32))
    batched_product(rt, stream, q, k, scores, s, t, h, b * nq, s * h, t * h, trans_b=True, alpha=sm_scale)
    qk_out = scores
    if softcap:
        scores = keep(unary(rt, stream, MUL_BY, keep(unary(rt, stream, TANH, keep(unary(
            rt, stream, DIV_BY, scores, float(softcap))))), float(softcap)))
        qk_out = scores if qk_matmul_output_mode == 1 else qk_out
    if attn_mask is not None:
        if attn_mask.shape[-1] != t:
            raise ValueError(f"attn_mask's last dimension {attn_mask.shape[-1]} differs from the {t} keys")
        if attn_mask.dtype == np.bool_:  # True: attend; False: -inf
            scores = keep(where(rt, stream, attn_mask, scores, keep(device_scalar(rt, stream, -np.inf)))[0])
        else:
            mask = keep(cast_to(rt, stream, attn_mask, F32)) if attn_mask.dtype != F32 else attn_mask
            scores = keep(binary(rt, stream, ADD, scores, mask))
    if is_causal:  # query i sees keys j <= i + the past length
        past = past_key.shape[2] if past_key is not None else 0
        future = np.arange(t)[None, :] > (past + np.arange(s))[:, None]
        causal = np.where(future, np.float32(-np.inf), np.float32(0))
        scores = keep(binary(rt, stream, ADD, scores, keep(rt.device(DeviceTensor.on_host(causal), stream))))
    if qk_matmul_output_mode == 2:
        qk_out = scores
    probs = keep(softmax_rows(rt, stream, scores, b * nq * s, t, ZERO_MASKED_ROWS))
    if qk_matmul_output_mode == 3:
        qk_out = probs
    out = keep(rt.alloc((b, nq, s, hv), F32))
    if t:
        batched_product(rt, stream, probs, v, out, s, hv, t, b * nq, s * t, t * hv)
    else:
        rt.zero(out, stream)
    if three_d:
        moved = keep(permuted(rt, stream, out, [0, 2, 1, 3]))
        out = DeviceTensor(moved.ptr, (b, s, nq * hv), F32)
    results = [cast_to(rt, stream, out, Q.dtype), present_k, present_v]
    if _num_outputs > 3:
        results.append(cast_to(rt, stream, qk_out, Q.dtype))
    results = results[:max(_num_outputs, 1)]
    returned = {r.ptr for r in results}
    for x in {x.ptr: x for x in scratch}.values():
        if x.ptr not in returned and x.ptr not in (Q.ptr, K.ptr, V.ptr):
            rt.free(x)  # stream-ordered
    return tuple(results)


def _repeat_heads(rt, stream, x, group):
    """(B, Nkv, T, H) -> (B, Nkv * group, T, H), each head repeated `group` times."""
    b, n, t, h = x.shape
    y = rt.alloc((b, n * group, t, h), x.dtype)
    rt.strided_copy(stream, x, y, (b, n, group, t * h), [n * t * h, t * h, 0, 1], [n * group * t * h, group * t * h,
                                                                                   t * h, 1])
    return y


def check_real_lengths(real_lengths, batch: int) -> None:
    """A recurrent kernel's real_lengths, no input of its op: where the executor pads a first prompt to a bucket
    (exec/cuda_capture.py Padding.stateful), GroupQueryAttention's seqlens_k (int32 [batch], the real length - 1),
    at which the state outputs stop (the kernels clamp each to the tokens given). A batch of one only: in a batch, a
    left-padded row's mask sum is not where its tokens end; the capture fails and the binding runs unpadded."""
    if real_lengths is not None and (batch != 1 or real_lengths.dtype != np.int32 or real_lengths.size < 1):
        raise ValueError(f"real lengths {real_lengths.shape} {real_lengths.dtype} for a batch of {batch}: a padded "
                         "prompt's recurrences take one sequence's int32 length")


def column_recurrence(d_k: int, readers: int) -> bool:
    """Whether attention.cu's linear_attention::run_columns takes these shapes (LinearAttention's and
    NormedLinearAttention's): a state column's d_k (32, 64 or 128) values in registers over four lanes, two tokens'
    rows (k, exp(decay), the readers' q and q.k) in shared memory's default 48 KiB."""
    return d_k in (32, 64, 128) and _column_shared(d_k, readers) <= 48 * 1024


def _column_shared(d_k: int, readers: int) -> int:
    """run_columns' shared memory: two tokens' buffers, each float4-aligned."""
    return 8 * (((2 + readers) * d_k + readers + 3) // 4 * 4)


LINEAR_CHUNK, CHUNK_COLUMNS = codes.LINEAR_CHUNK, codes.CHUNK_COLUMNS
CHUNK_SLAB_BYTES = 1 << 27  # chunk_prepare's output for one launch at most: longer prompts go in slabs of chunks


def chunked_recurrence(tokens: int, d_k: int, decay_per_key: bool) -> bool:
    """Whether a prompt's recurrence takes attention.cu's chunked form (chunk_prepare, chunk_scan): a chunk of
    LINEAR_CHUNK tokens or more, one decay a head (the chunk's decays are summed per head), d_k 32, 64 or 128."""
    return tokens >= LINEAR_CHUNK and d_k in (32, 64, 128) and not decay_per_key


def _chunk_floats(d_k: int, d_v: int, readers: int) -> int:
    """A chunk's values (attention.cu ChunkLayout: W, Kc, U0, per reader Qg and P, gamma, the state before it)."""
    return LINEAR_CHUNK * (2 * d_k + d_v + readers * (d_k + LINEAR_CHUNK)) + 4 + d_k * d_v


def _chunk_scan_shared(d_k: int) -> int:
    """chunk_scan's shared memory: the state's columns [d_k][CHUNK_COLUMNS], U [C][CHUNK_COLUMNS], W and Kc [C][d_k]."""
    return 4 * (d_k * CHUNK_COLUMNS + LINEAR_CHUNK * CHUNK_COLUMNS + 2 * LINEAR_CHUNK * d_k)


def _chunk_shared(d_k: int) -> int:
    """chunk_prepare's shared memory: k rows [C][d_k + 4], q rows there or the forward substitution's values
    [C][CHUNK_THREADS], L and the rates [C], A [C][C]."""
    c = LINEAR_CHUNK
    return 4 * (c * (d_k + 4) + c * max(d_k + 4, codes.CHUNK_THREADS) + 2 * c + c * c)


def _linear_chunks(rt, stream, tensors, out, present, shape, kv_heads, d_k, d_v, readers, real_lengths):
    """The chunked recurrence: chunk_prepare over a slab of chunks (all at once), chunk_scan through them (the state
    carried in float32 between slabs), then chunk_output (all at once)."""
    query, key, value, past_state, decay, beta = tensors
    b, t = query.shape[:2]
    chunks, floats = -(-t // LINEAR_CHUNK), _chunk_floats(d_k, d_v, readers)
    slab = max(1, min(chunks, CHUNK_SLAB_BYTES // (4 * floats * b * kv_heads)))
    work = rt.alloc((slab * b * kv_heads * floats,), F32)
    carry = rt.alloc(present.shape, F32) if slab < chunks else None
    suffix = f"k{d_k}_{SUFFIX[query.dtype]}"
    for first in range(0, chunks, slab):
        count = min(slab, chunks - first)
        rt.launch_rows(f"seamless_linear_chunk_prepare_{suffix}", b * kv_heads * count, stream, ("ptr", query.ptr),
                       ("ptr", key.ptr), ("ptr", value.ptr), ("ptr", decay.ptr if decay is not None else 0),
                       ("ptr", beta.ptr if beta is not None else 0), ("ptr", work.ptr),
                       ("ptr", real_lengths.ptr if real_lengths is not None else 0), shape, ("int", first),
                       ("int", count), shared=_chunk_shared(d_k), threads=codes.CHUNK_THREADS)
        splits = -(-d_v // CHUNK_COLUMNS)
        rt.launch_rows(f"seamless_linear_chunk_scan_{suffix}", b * kv_heads * splits, stream,
                       ("ptr", past_state.ptr if past_state is not None else 0), ("ptr", work.ptr),
                       ("ptr", carry.ptr if carry is not None else 0), ("ptr", present.ptr), shape, ("int", first),
                       ("int", count), ("int", int(first + count == chunks)), shared=_chunk_scan_shared(d_k),
                       threads=codes.CHUNK_SCAN_THREADS)
        rt.launch_rows(f"seamless_linear_chunk_output_{suffix}", b * kv_heads * count * splits, stream,
                       ("ptr", work.ptr), ("ptr", out.ptr), shape, ("int", first), ("int", count),
                       threads=codes.CHUNK_SCAN_THREADS)
    for x in (work, carry):
        if x is not None:
            rt.free(x)  # stream-ordered


def _linear_recurrence(rt, stream, query, key, value, past_state, decay, beta, q_heads, kv_heads, k_heads, d_k, d_v,
                       scale, update_rule, real_lengths, q_scale=None):
    """attention.cu's recurrence (shapes checked by the caller): (output, present state), both of the query's type
    (the op's T: past_state's too); the state is float32 while it runs. q_scale (NormedLinearAttention): q and k
    rows over their L2 norms as the kernel loads them, q's then times q_scale (0.0: no factor)."""
    b, t = query.shape[:2]
    check_real_lengths(real_lengths, b)
    gated, delta = update_rule in ("gated", "gated_delta"), update_rule in ("delta", "gated_delta")
    out = rt.alloc((b, t, max(q_heads, kv_heads) * d_v), query.dtype)
    present = rt.alloc((b, kv_heads, d_k, d_v), query.dtype)
    per_key = gated and decay.shape[-1] != kv_heads
    shape = struct_arg("LinearAttentionShape", batch=b, tokens=t, q_heads=q_heads, kv_heads=kv_heads, k_heads=k_heads,
                       d_k=d_k, d_v=d_v, gated=int(gated), delta=int(delta), decay_per_key=int(per_key),
                       beta_per_head=int(delta and beta.shape[-1] != 1), qk_l2_norm=int(q_scale is not None),
                       scale=float(np.float32(scale) if scale else np.float32(1 / np.sqrt(d_k))),
                       q_scale=float(q_scale or 0.0))
    readers = max(q_heads // kv_heads, 1)
    if q_scale is not None and not column_recurrence(d_k, readers):
        raise ValueError(f"NormedLinearAttention: d_k {d_k}, {readers} query heads a state: not shapes its kernel "
                         "takes (column_recurrence; plan/fusion.py fuses only those)")
    if chunked_recurrence(t, d_k, per_key):
        _linear_chunks(rt, stream, (query, key, value, past_state, decay if gated else None, beta if delta else None),
                       out, present, shape, kv_heads, d_k, d_v, readers, real_lengths)
        return out, present
    work = None
    blocks = b * kv_heads
    if column_recurrence(d_k, readers):  # a warp per 8 state columns, a column's d_k values in four lanes' registers
        name, launch = f"seamless_linear_attention_k{d_k}", dict(shared=_column_shared(d_k, readers), threads=32)
        blocks *= -(-d_v // 8)
    else:  # the state in global memory
        name, launch = "seamless_linear_attention", dict(shared=4 * (d_k + d_v + readers * d_k))
        work = rt.alloc(present.shape, F32)
    rt.launch_rows(f"{name}_{SUFFIX[query.dtype]}", blocks, stream, ("ptr", query.ptr),
                   ("ptr", key.ptr), ("ptr", value.ptr), ("ptr", past_state.ptr if past_state is not None else 0),
                   ("ptr", decay.ptr if gated else 0), ("ptr", beta.ptr if delta else 0), ("ptr", out.ptr),
                   ("ptr", work.ptr if work is not None else 0), ("ptr", present.ptr),
                   ("ptr", real_lengths.ptr if real_lengths is not None else 0), shape, **launch)
    if work is not None:
        rt.free(work)  # stream-ordered
    return out, present


@kernel("LinearAttention", since=27, types=GPU_FLOATS, device="cuda", check=check_linear_attention)
def linear_attention(rt, stream, query, key, value, past_state=None, decay=None, beta=None, real_lengths=None, *,
                     chunk_size=64,
                     kv_num_heads, q_num_heads, scale=0.0, update_rule="gated_delta"):
    """The recurrence, its state in float32 (chunk_size is a hint for chunked implementations; ours: LINEAR_CHUNK)."""
    b, t, width = query.shape
    d_k, d_v = width // q_num_heads, value.shape[-1] // kv_num_heads
    gated, delta = update_rule in ("gated", "gated_delta"), update_rule in ("delta", "gated_delta")
    problem = ("heads" if q_num_heads % kv_num_heads or width % q_num_heads or value.shape[-1] % kv_num_heads else
               "key" if key.shape != (b, t, kv_num_heads * d_k) else
               "value" if len(value.shape) != 3 or value.shape[:2] != (b, t) else
               "decay" if gated and (decay is None or len(decay.shape) != 3 or decay.shape[:2] != (b, t) or
                                     decay.shape[-1] not in (kv_num_heads, kv_num_heads * d_k)) else
               "beta" if delta and (beta is None or len(beta.shape) != 3 or beta.shape[:2] != (b, t) or
                                    beta.shape[-1] not in (kv_num_heads, 1)) else
               "past_state" if past_state is not None and tuple(past_state.shape) != (b, kv_num_heads, d_k, d_v) else "")
    if problem:
        raise ValueError(f"LinearAttention ({update_rule}): query {query.shape}, key {key.shape}, value {value.shape}, "
                         f"q_num_heads {q_num_heads}, kv_num_heads {kv_num_heads}: the {problem} input or attribute "
                         "does not fit (see the ONNX spec)")
    return _linear_recurrence(rt, stream, query, key, value, past_state, decay, beta, q_num_heads, kv_num_heads,
                              kv_num_heads, d_k, d_v, scale, update_rule, real_lengths)


def _check_ms_linear_attention(node, graph):
    reason = check_linear_attention(node, graph)
    if reason:
        return reason
    if node.attrs.get("q_num_heads", 0) <= 0 or node.attrs.get("kv_num_heads", 0) <= 0:
        return "q_num_heads and kv_num_heads must be positive (stock refuses the model)"
    return None


@kernel("LinearAttention", domain="com.microsoft", types=GPU_FLOATS, device="cuda", check=_check_ms_linear_attention)
def ms_linear_attention(rt, stream, query, key, value, past_state=None, decay=None, beta=None, real_lengths=None, *,
                        q_num_heads,
                        kv_num_heads, update_rule="gated_delta", scale=0.0, chunk_size=64, state_window=0):
    """The CPU kernel's shapes and checks (GQA, inverse GQA, fewer K than V heads); the state in past_state's type
    (the query's when absent)."""
    d_k, d_v, k_heads = linear_attention_geometry(query.shape, key.shape, value.shape, shape_or_none(past_state),
                                                  shape_or_none(decay), shape_or_none(beta), q_num_heads,
                                                  kv_num_heads, update_rule)
    return _linear_recurrence(rt, stream, query, key, value, past_state, decay, beta, q_num_heads, kv_num_heads,
                              k_heads, d_k, d_v, scale, update_rule, real_lengths)


@kernel("NormedLinearAttention", domain=FUSED_DOMAIN, types=GPU_FLOATS, device="cuda",
        check=_check_ms_linear_attention)
def normed_linear_attention(rt, stream, query, key, value, past_state=None, decay=None, beta=None, real_lengths=None,
                            *, q_num_heads, kv_num_heads, update_rule="gated_delta", scale=0.0, chunk_size=64,
                            state_window=0, q_scale=0.0):
    """plan/fusion.py normed_linear_attention: com.microsoft LinearAttention of LpNormalization(p=2)'s rows of
    query (times q_scale) and key, normalised by the kernel as it loads them."""
    d_k, d_v, k_heads = linear_attention_geometry(query.shape, key.shape, value.shape, shape_or_none(past_state),
                                                  shape_or_none(decay), shape_or_none(beta), q_num_heads,
                                                  kv_num_heads, update_rule)
    return _linear_recurrence(rt, stream, query, key, value, past_state, decay, beta, q_num_heads, kv_num_heads,
                              k_heads, d_k, d_v, scale, update_rule, real_lengths, q_scale)


# --- com.microsoft GatedDeltaNet -----------------------------------------------------------

GDN_HEAD_SIZES = (32, 64, 128)  # attention.cu's gated_delta_net: d_k in registers


def _check_gated_delta_net_cuda(node, graph):
    """The CPU kernel's, and what attention.cu's does not take (those run the CPU kernel on the host): ragged
    requests, packed q|k|v, decay/beta/state not float32, head sizes q/k other than GDN_HEAD_SIZES, d_v above
    GDN_THREADS (a thread a state row)."""
    reason = cpu_attention.check_gated_delta_net(node, graph)
    if reason:
        return reason
    inputs = node.inputs + [""] * 9
    if inputs[3]:
        return "cu_seqlens (ragged requests) on CUDA"
    if not inputs[1] or not inputs[2]:
        return "packed q|k|v on CUDA"
    if any(inputs[i] and graph.value(inputs[i]).dtype != F32 for i in (4, 5, 6, 7, 8)):
        return "decay, beta, initial_state, a_log and dt_bias of float32 on CUDA"
    q, v = (graph.value(inputs[i]).shape or () for i in (0, 2))
    if not q or q[-1] not in GDN_HEAD_SIZES or not v or not isinstance(v[-1], int) or \
            v[-1] > codes.GDN_THREADS:
        return f"head sizes q/k in {GDN_HEAD_SIZES} and v up to {codes.GDN_THREADS} on CUDA"
    return None


@kernel("GatedDeltaNet", domain="com.microsoft", types=GPU_FLOATS, device="cuda", check=_check_gated_delta_net_cuda)
def gated_delta_net(rt, stream, query, key=None, value=None, cu_seqlens=None, decay=None, beta=None, initial_state=None,
                    a_log=None, dt_bias=None, capture_count=None, state_update_active=None, *,
                    update_rule="gated_delta", gate_activation="none", beta_activation="none", qk_l2_norm=0, scale=0.0,
                    chunk_size=64, gate_lower_bound=-5.0, state_update_capacity=0):
    """Uniform requests (the batch from initial_state, or query's [B, S] axes), the CPU kernel's checks."""
    rank4 = len(query.shape) == 4
    if len(query.shape) not in (3, 4) or len(key.shape) != len(query.shape) or len(value.shape) != len(query.shape):
        raise ValueError(f"query, key and value must be rank 3 [T, H, D] or rank 4 [B, S, H, D], got {query.shape}, "
                         f"{key.shape}, {value.shape}")
    token_major = lambda shape: (int(np.prod(shape[:-2])), *shape[-2:])  # noqa: E731 ([B, S, H, D] -> [T, H, D])
    tokens, h_q, d_k, h_v, d_v, batch = cpu_attention.gdn_geometry(
        token_major(query.shape), token_major(key.shape), token_major(value.shape), None,
        query.shape[0] if rank4 else None, shape_or_none(initial_state), shape_or_none(decay), shape_or_none(beta),
        None if a_log is None else a_log.size, None if dt_bias is None else dt_bias.size, update_rule, gate_activation)
    gated, delta = update_rule in ("gated", "gated_delta"), update_rule in ("delta", "gated_delta")
    gate = {"none": 0, "softplus": 1, "qwen": 1, "sigmoid": 2, "kda": 2}[gate_activation] if gated else 0
    out = rt.alloc(tuple(query.shape[:-2]) + (h_v, d_v), query.dtype)
    state = rt.alloc((batch, h_v, d_v, d_k), F32)
    shape = struct_arg("GatedDeltaNetShape", batch=batch, seq=tokens // batch, q_heads=h_q, v_heads=h_v, d_v=d_v,
                       gated=int(gated), delta=int(delta), decay_per_key=int(gated and decay.size != tokens * h_v),
                       bias_per_key=int(bool(gate) and dt_bias.size != h_v), gate=gate,
                       beta_sigmoid=int(beta_activation == "sigmoid"), l2_norm=int(bool(qk_l2_norm)),
                       scale=float(np.float32(scale) if scale else np.float32(1 / np.sqrt(d_k))),
                       lower_bound=float(gate_lower_bound))
    rt.launch_rows(f"seamless_gated_delta_net_k{d_k}_{SUFFIX[query.dtype]}", batch * h_v, stream, ("ptr", query.ptr),
                   ("ptr", key.ptr), ("ptr", value.ptr), ("ptr", decay.ptr if gated else 0),
                   ("ptr", beta.ptr if delta else 0), ("ptr", initial_state.ptr),
                   ("ptr", a_log.ptr if gate else 0), ("ptr", dt_bias.ptr if gate else 0), ("ptr", out.ptr),
                   ("ptr", state.ptr), shape, threads=max(32, -(-d_v // 32) * 32))
    return out, state


# --- com.microsoft GroupQueryAttention ----------------------------------------------------

MAX_SHARED = 48 * 1024  # default dynamic shared memory per block
ATTEND_THREADS = 256    # runtime/cuda.py launch_rows
DECODE_THREADS = codes.DECODE_THREADS  # gqa_decode: a present row to each head_size / 8 of them
# gqa_decode_grouped (a block per KV head, its query heads in turn) from this many blocks, about one an H200 SM:
# there a step of the 1B shape at 32k tokens took 2.51 ms of GPU time against 3.57 a block per query head, at 8k 1.14
# against 1.35, the 0.5B's at 32k 2.07 against 2.40 (docs/benchmarks/gpu.md, session 47); below it not measured
DECODE_GROUPED_BLOCKS = 128
# gqa_decode_stream (16-bit caches of head size 64 or 128, where decode_grouped would run): its splits make about
# this many blocks, two an SM of the H100/H200's 132: at the 1B shape's 32k tokens 50 us a layer, against 73 at 132
# blocks and 74 at 528 (H100; 1.7B shape 69 / 93 / 89: docs/benchmarks/gpu.md, session 54)
STREAM_BLOCKS = 264
DECODE_HEAD_SIZES = (64, 128)  # gqa_decode compiled for these (16-bit types): an int4 layer 17.6 -> 16.9 us (H200)
ATTEND_TILE = codes.ATTEND_TILE  # attend_tiles: query tokens a block (a warp per 16)


def _prepare_wide(head_size, rot_half, tensors) -> bool:
    """attention.cu prepare takes eight elements a thread where every row is whole 16-byte groups."""
    return head_size % 8 == 0 and rot_half % 8 == 0 and all(t.ptr % 16 == 0 for t in tensors if t is not None)


def _decode_passes(s, h, present_len) -> int:
    """Rows a lane group of gqa_decode (a decode step in one launch) takes: 4 where that is one block, else 8:
    half the blocks (after 4000 tokens a step's run call 5-10 % shorter on the H200: docs/benchmarks/gpu.md); 0
    when gqa_decode does not take this shape (a prompt, a head size whose eighths do not divide a warp)."""
    if s != 1 or h % 8 or 32 % (h // 8):
        return 0
    return 8 if present_len > _decode_rows(4, h) else 4


def _decode_rows(passes, h) -> int:
    """Present rows one gqa_decode block takes (a chunk of gqa_decode_stream's): `passes` a lane group of
    head_size / 8 threads."""
    return passes * DECODE_THREADS // (h // 8)


def _check_gqa(node, graph):
    kv = [graph.value(n).dtype for n in node.inputs[3:5] if n]
    if any(t != graph.value(node.inputs[0]).dtype for t in kv):
        return "KV cache of another type than the query"
    if graph.value(node.inputs[5]).dtype != np.int32:
        return "seqlens_k must be int32"
    return gqa_config_problem(node, graph, qk_norm=True)


@kernel("GroupQueryAttention", domain="com.microsoft", types=GPU_FLOATS, device="cuda", check=_check_gqa,
        host_inputs=(6,), capture="device-indexed")
def group_query_attention(rt, stream, query, key=None, value=None, past_key=None, past_value=None, seqlens_k=None,
                          total_sequence_length=None, cos_cache=None, sin_cache=None, position_ids=None,
                          attention_bias=None, head_sink=None, k_scale=None, v_scale=None, q_norm_weight=None,
                          k_norm_weight=None, query_seqlens=None, *, num_heads, kv_num_heads, scale=0.0,
                          softcap=0.0, local_window_size=-1, do_rotary=0, rotary_interleaved=0, smooth_softmax=-1,
                          qk_output=0, causal=1, sliding_window_cache=0, kv_cache_bit_width=0, k_quant_type="NONE",
                          v_quant_type="NONE", qk_norm_epsilon=1e-6, q_norm_epsilon=1e-6, k_norm_epsilon=1e-6,
                          _readers=(), _output_buffer=None, _gpu_check=None):
    b, s = query.shape[:2]
    _gqa_shapes(query, key, value, past_key, past_value, seqlens_k, total_sequence_length,
                (cos_cache, sin_cache) if do_rotary else None, num_heads, kv_num_heads)
    # seqlens_k's values are checked when known on the host; on the GPU the kernels clamp and report them
    window = local_window_size if sliding_window_cache else 0
    total = int(rt.to_host(total_sequence_length, stream).reshape(-1)[0])
    h, first_prompt, present_len, _ = gqa_layout(
        query.shape, key is None, past_key.shape if past_key is not None else None, seqlens_k.host, total,
        num_heads, kv_num_heads, cos_cache.shape if do_rotary else None, window)
    seq_bound = max(total, present_len)  # gqa_layout's bound of seqlens_k's values
    normed = []  # Qwen3's per-head RMSNorm of q and k (the builder's -e cuda fuses it in), on copies of them
    if q_norm_weight is not None:
        query, key, normed = _qk_normed(rt, stream, query, key, q_norm_weight, k_norm_weight, num_heads, kv_num_heads,
                                        h, qk_norm_epsilon)
    # a window-sized cache: attention over a work buffer of the past's C rows and the S new ones (attention.cu)
    work_len = present_len + s if window else present_len
    rows = (query, key, value, past_key, past_value, cos_cache, sin_cache)  # read 16 bytes at a time by gqa_decode
    passes = not window and all(t.ptr % 16 == 0 for t in rows if t is not None) and _decode_passes(s, h, present_len)
    smooth = smooth_softmax == 1 or head_sink is not None
    # a prompt in tiles of queries (attention.cu attend_tiles), else a block a query with its scores in shared memory
    tiles = not passes and SUFFIX[query.dtype] in ("f16", "bf16") and h in (64, 128, 256) and softcap == 0.0 and \
        local_window_size <= 0 and not smooth
    shared = (work_len + h + max(ATTEND_THREADS, 8 * h)) * 4  # native/cuda/attention.cu attend
    if not passes and not tiles and shared > MAX_SHARED:
        raise ValueError(f"CUDA GroupQueryAttention handles up to {MAX_SHARED // 4 - h - max(ATTEND_THREADS, 8 * h)} "
                         f"cached tokens for {s} new tokens of head size {h}, got {work_len} (a decode step of one "
                         f"token has no such limit where the head size is 8, 16, 32, 64, 128 or 256, nor a float16 or "
                         f"bfloat16 prompt of head size 64, 128 or 256 without softcap, local window or sink)")
    dtype = query.dtype
    kv_shape = (b, kv_num_heads, present_len, h)
    # the present KV straight into ORT's outputs where the caller takes them (no copy after the run)
    pk, pv = (rt.output(_output_buffer, i, kv_shape, dtype) for i in (1, 2))
    # ... and where those are the past's own buffers (bound as one by the caller), a decode step writes only its new row
    in_place = past_key is not None and past_key.shape == kv_shape and (pk.ptr, pv.ptr) == (past_key.ptr, past_value.ptr)
    out = rt.alloc((b, s, num_heads * h), dtype)
    sink = None
    if smooth:
        sink = rt.alloc((num_heads,), np.float32)
        if head_sink is None:
            rt.zero(sink, stream)
        else:
            rt.launch(f"seamless_cast_{SUFFIX[head_sink.dtype]}_f32", num_heads, stream, ("int64", num_heads),
                      ("ptr", head_sink.ptr), ("ptr", sink.ptr))
    half = cos_cache.shape[1] if do_rotary else 0
    check = gpu_check_fields(_gpu_check, rt, stream, f"seqlens_k value {{value}} is out of range [0, {seq_bound}) or "
                          f"shorter than the {s} new tokens")
    shape = struct_arg("GqaShape", batch=b, seq=s, heads=num_heads, kv_heads=kv_num_heads, head_size=h,
                       present_len=work_len, rot_half=half, do_rotary=int(bool(do_rotary)),
                       interleaved=int(bool(rotary_interleaved)), packed=int(key is None),
                       first_prompt=int(first_prompt), cos_rows=cos_cache.shape[0] if do_rotary else 0,
                       past_buf=past_key.shape[2] if past_key is not None else 0, seq_bound=seq_bound, window=window,
                       capacity=present_len if window else 0, check=check)
    suffix = SUFFIX[dtype]
    sm_scale = float(scale) if scale != 0.0 else 1.0 / float(np.sqrt(np.float32(h)))
    # the past read before waiting for the kernel before where no launch of this run writes it (DeviceTensor.settled)
    early = past_key is not None and past_key.settled and past_value is not None and past_value.settled
    # a decode step lets the next kernel launch once its blocks have their inputs where that kernel is a quantized
    # projection (its few weights need little time to stream into L2 ahead), else at once (attention.cu decode)
    late_launch = bool(_readers) and all(op == "MatMulNBits" for op in _readers)
    params = struct_arg("AttendParams", scale=sm_scale, softcap=float(softcap), local_window=int(local_window_size),
                        causal=int(causal), smooth=int(sink is not None), early=int(early),
                        late_launch=int(late_launch), in_place=int(in_place))
    qkv = [("ptr", query.ptr), ("ptr", key.ptr if key is not None else 0), ("ptr", value.ptr if value is not None else 0),
           ("ptr", cos_cache.ptr if do_rotary else 0), ("ptr", sin_cache.ptr if do_rotary else 0), ("ptr", seqlens_k.ptr)]
    past = [("ptr", past_key.ptr if past_key is not None else 0), ("ptr", past_value.ptr if past_value is not None else 0)]
    scratch = ([sink] if sink else []) + normed
    if passes:  # one launch, split over keys where the context is long
        splits = -(-present_len // _decode_rows(passes, h))
        known = f"_h{h}" if h in DECODE_HEAD_SIZES and suffix in ("f16", "bf16") else ""  # compiled for that size
        # long enough for a block per KV head and split to fill the GPU: each row read once for the group's heads
        grouped = passes == 8 and num_heads > kv_num_heads and splits * b * kv_num_heads >= DECODE_GROUPED_BLOCKS
        name, heads, subs, shared = f"p{passes}", num_heads, 1, 0
        if grouped and known:  # rows streamed through shared memory, a few long splits
            subs = -(-(num_heads // kv_num_heads) // codes.STREAM_HEADS)  # a group's blocks of a split, side by side
            rows = _decode_rows(codes.STREAM_PASSES, h)  # a chunk's (attention.cu stream_rows)
            splits = max(1, min(-(-present_len // rows), -(-STREAM_BLOCKS // (b * kv_num_heads * subs))))
            name, heads, shared = "stream", kv_num_heads, codes.STREAM_STAGES * 2 * rows * h * np.dtype(dtype).itemsize
        elif grouped:  # a block per KV head and split, its query heads in turn
            name, heads = f"grouped_p{passes}", kv_num_heads
        partial = rt.alloc((b * num_heads * splits * (h + 2),), np.float32)
        scratch.append(partial)
        rt.launch_rows(f"seamless_gqa_decode_{name}{known}_{suffix}", (splits * subs, b * heads), stream, *past, *qkv,
                       ("ptr", sink.ptr if sink else 0), ("ptr", pk.ptr), ("ptr", pv.ptr), ("ptr", out.ptr),
                       ("ptr", partial.ptr), ("ptr", rt.counters(b * num_heads, stream).ptr), shape,
                       params, threads=DECODE_THREADS, shared=shared)
    else:  # the present (or work) buffers and q, then a block per query row or per tile of them
        q = rt.alloc((b, num_heads, s, h), dtype)
        scratch.append(q)
        wk, wv = (rt.alloc((b, kv_num_heads, work_len, h), dtype) for _ in range(2)) if window else (pk, pv)
        scratch += [wk, wv] if window else []
        n = wk.size + b * s * (num_heads + 2 * kv_num_heads) * h  # the present buffers, then the new tokens
        wide = _prepare_wide(h, half, (*rows, q, wk, wv))
        rt.launch(f"seamless_gqa_prepare_{suffix}", n // 8 if wide else n, stream, *past, *qkv, ("ptr", q.ptr),
                  ("ptr", wk.ptr), ("ptr", wv.ptr), shape, ("int", int(wide)))
        if tiles:
            rt.launch_rows(f"seamless_gqa_attend_tiles_h{h}_{suffix}", b * num_heads * -(-s // ATTEND_TILE), stream,
                           ("ptr", q.ptr), ("ptr", pk.ptr), ("ptr", pv.ptr), ("ptr", seqlens_k.ptr), ("ptr", out.ptr),
                           shape, params, threads=ATTEND_TILE * 2)  # a warp per 16 queries
        else:
            rt.launch_rows(f"seamless_gqa_attend_{suffix}", b * num_heads * s, stream, ("ptr", q.ptr), ("ptr", wk.ptr),
                           ("ptr", wv.ptr), ("ptr", seqlens_k.ptr), ("ptr", sink.ptr if sink else 0),
                           ("ptr", out.ptr), shape, params, shared=shared)
        if window:
            rt.launch(f"seamless_gqa_window_keep_{suffix}", pk.size, stream, ("ptr", wk.ptr), ("ptr", wv.ptr),
                      ("ptr", seqlens_k.ptr), ("ptr", pk.ptr), ("ptr", pv.ptr), shape)
    for t in scratch:
        rt.free(t)  # stream-ordered: reused only by later work on this stream
    return out, pk, pv


def _qk_normed(rt, stream, query, key, q_weight, k_weight, num_heads, kv_num_heads, h, eps):
    """query and key with each head's h values RMS-normalised by its weight (normalization.cu head_rmsnorm), as
    ORT's CUDA GroupQueryAttention does before the rotary embedding; packed q|k|v copied first (v as it is). The
    new query and key, and the buffers to free after the attention."""
    for name, w in (("q_norm_weight", q_weight), ("k_norm_weight", k_weight)):
        if w is None or w.size != h or w.dtype != query.dtype:
            raise InvalidArgument(f"{name} must hold head_size ({h}) values of the query's type {query.dtype}, got "
                                  f"{None if w is None else (w.shape, w.dtype)}")
    rows, item = query.shape[0] * query.shape[1], query.dtype.itemsize
    name = f"seamless_head_rmsnorm_{SUFFIX[query.dtype]}"

    def norm(src, w, dst, heads, pitch, offset=0):  # a warp a head vector
        rt.launch(name, rows * heads * 32, stream, ("ptr", src.ptr + offset), ("ptr", w.ptr), ("ptr", dst.ptr + offset),
                  ("int64", rows), ("int64", heads), ("int64", pitch), ("int64", h), ("float", float(eps)))
    q = rt.alloc(query.shape, query.dtype)
    if key is None:  # packed: q, then k, normalised in place in the copy
        pitch = (num_heads + 2 * kv_num_heads) * h
        rt.copy(q.ptr, query.ptr, query.nbytes, stream)
        norm(q, q_weight, q, num_heads, pitch)
        norm(q, k_weight, q, kv_num_heads, pitch, num_heads * h * item)
        return q, None, [q]
    k = rt.alloc(key.shape, key.dtype)
    norm(query, q_weight, q, num_heads, num_heads * h)
    norm(key, k_weight, k, kv_num_heads, kv_num_heads * h)
    return q, k, [q, k]


def _gqa_shapes(query, key, value, past_key, past_value, seqlens_k, total_sequence_length, caches, num_heads,
                kv_num_heads):
    """The shapes the kernels address the tensors by, checked as ORT does: query (B, S, N * H) or packed
    (B, S, (N + 2 Nkv) * H), key and value (B, S, Nkv * H), the past (B, Nkv, P, H) both, seqlens_k (B,), one
    total length, cos and sin caches of one shape."""
    if len(query.shape) != 3:
        raise InvalidArgument(f"Input 'query' is expected to have 3 dimensions, got {len(query.shape)}")
    b, s, hidden = query.shape
    heads = num_heads + (2 * kv_num_heads if key is None else 0)
    if hidden % heads:
        raise ValueError(f"query hidden size {hidden} is not a multiple of the {heads} heads it holds")
    h = hidden // heads
    if key is not None:
        for name, t in (("key", key), ("value", value)):
            if t is None or t.shape != (b, s, kv_num_heads * h):
                raise InvalidArgument(f"Input '{name}' of shape {None if t is None else t.shape} must be {(b, s)} by "
                                      f"kv_num_heads * head_size ({kv_num_heads} * {h})")
    if past_key is not None:
        if past_key.shape[:2] != (b, kv_num_heads) or len(past_key.shape) != 4 or past_key.shape[3] != h:
            raise InvalidArgument(f"Input 'past_key' of shape {past_key.shape} must be (batch_size {b}, "
                                  f"kv_num_heads {kv_num_heads}, past length, head_size {h})")
        if past_value.shape != past_key.shape:
            raise InvalidArgument(f"Inputs 'past_key' {past_key.shape} and 'past_value' {past_value.shape} must "
                                  "have the same shape")
    if seqlens_k.shape != (b,):
        raise InvalidArgument(f"seqlens_k must be shape (batch_size {b}), got {seqlens_k.shape}")
    if total_sequence_length.size != 1:
        raise InvalidArgument(f"total_sequence_length must be one value, got shape {total_sequence_length.shape}")
    if caches is not None and (len(caches[0].shape) != 2 or caches[1].shape != caches[0].shape):
        raise InvalidArgument(f"cos_cache and sin_cache must be 2-D of the same shape. Got cos_cache shape "
                              f"{caches[0].shape} and sin_cache shape {caches[1].shape}.")


# --- RotaryEmbedding (com.microsoft and ONNX 23) ------------------------------------------


def _check_rotary(node, graph):
    a = node.attrs
    if a.get("is_packed_batching", 0):
        return "is_packed_batching=1 (ragged batches) not supported"
    if a.get("scale", 1.0) != 1.0:
        return f"scale={a['scale']} not supported (1.0 only)"
    if any(graph.value(name).dtype != graph.value(node.inputs[0]).dtype for name in node.inputs[2:4]):
        return "cos/sin caches of another type than the input"
    if graph.value(node.inputs[1]).dtype != np.int64:
        return "position_ids must be int64"
    return None


@kernel("RotaryEmbedding", domain="com.microsoft", types=GPU_FLOATS, device="cuda", check=_check_rotary,
        capture="device-indexed")
def rotary_embedding(rt, stream, x, position_ids, cos_cache, sin_cache, *, interleaved=0, num_heads=0,
                     rotary_embedding_dim=0, is_packed_batching=0, scale=1.0, _gpu_check=None):
    """x (B, S, N*H) or (B, N, S, H); position_ids (1,) = the first token's position, or (B, S)."""
    if len(x.shape) not in (3, 4) or len(cos_cache.shape) != 2:
        raise InvalidArgument(f"RotaryEmbedding: input of shape {x.shape} (3-D or 4-D expected) and cos_cache of "
                              f"shape {cos_cache.shape} (2-D expected)")
    b = x.shape[0]
    if len(x.shape) == 3:
        s = x.shape[1]
        h = x.shape[2] // num_heads if num_heads else (rotary_embedding_dim or 2 * cos_cache.shape[1])
        n = x.shape[2] // h if h else 0
        if n * h != x.shape[2]:  # the kernel walks the tokens by heads of h
            raise InvalidArgument(f"RotaryEmbedding: hidden size {x.shape[2]} is not a whole number of heads of "
                                  f"size {h}")
    else:
        n, s, h = x.shape[1:]
    rot_half = (rotary_embedding_dim or h) // 2
    if rot_half > cos_cache.shape[1] or 2 * rot_half > h:
        raise ValueError(f"RotaryEmbedding: rotary dimension {2 * rot_half} needs cos/sin caches of width "
                         f"{rot_half} (got {cos_cache.shape[1]}) and a head size of at least that (got {h})")
    return (_rotate(rt, stream, x, position_ids, cos_cache, sin_cache, b, s, n, h, rot_half, interleaved,
                    _gpu_check),)


def _rotate(rt, stream, x, position_ids, cos_cache, sin_cache, b, s, n, h, rot_half, interleaved, gpu_check):
    """x (B, S, N*H) or (B, N, S, H) with rotary embedding; position_ids (1,) (the first token's
    position), (B, S), or None (the caches have a row per token)."""
    if sin_cache.shape != cos_cache.shape:
        raise InvalidArgument(f"Inputs 'cos_cache' {cos_cache.shape} and 'sin_cache' {sin_cache.shape} are expected "
                              "to have the same shape")
    first_only = position_ids is not None and position_ids.size == 1  # the others follow
    if position_ids is not None and not first_only and position_ids.shape != (b, s):
        raise InvalidArgument(f"RotaryEmbedding: position_ids of shape {position_ids.shape}; expected (1,) or "
                              f"{(b, s)}")
    rows = cos_cache.shape[0] if position_ids is not None else b * s
    if position_ids is None and cos_cache.size != b * s * cos_cache.shape[-1]:
        raise ValueError(f"RotaryEmbedding without position_ids needs caches of shape {(b, s, rot_half)}, "
                         f"got {cos_cache.shape}")
    # checked when known on the host, else clamped and reported on the GPU
    if position_ids is not None and position_ids.host is not None:
        pos = position_ids.host.reshape(-1)
        pos = pos[0] + np.arange(s) if first_only else pos
        bad = checks.first_outside(pos, 0, rows)
        if bad:
            raise InvalidArgument(f"position_ids value {bad[1]} at index {bad[0]} is out of range [0, {rows}): "
                                  f"positions {pos.min()}..{pos.max()} outside the cos/sin caches' {rows} rows")
    y = rt.alloc(x.shape, x.dtype)
    check = gpu_check_fields(gpu_check, rt, stream, f"position_ids value {{value}} is out of range [0, {rows})")
    shape = struct_arg("RotaryShape", batch=b, seq=s, heads=n, head_size=h, rot_half=rot_half,
                       cache_half=cos_cache.shape[-1], interleaved=int(bool(interleaved)), bnsh=int(len(x.shape) == 4),
                       first_only=int(first_only), cache_rows=rows, check=check)
    rt.launch(f"seamless_rotary_{SUFFIX[x.dtype]}", y.size, stream, ("int64", y.size), ("ptr", x.ptr),
              ("ptr", position_ids.ptr if position_ids is not None else 0), ("ptr", cos_cache.ptr),
              ("ptr", sin_cache.ptr), ("ptr", y.ptr), shape)
    return y


def _check_mrotary(node, graph, caches=None):
    """caches: the type the cos/sin caches must have (the input's where None)."""
    if node.attrs.get("is_packed_batching", 0):
        return "is_packed_batching=1 (ragged batches) not supported"
    if any(graph.value(name).dtype != (caches or graph.value(node.inputs[0]).dtype) for name in node.inputs[2:4]):
        return f"cos/sin caches of another type than {caches or 'the input'}"
    return None


@kernel("MRotaryEmbedding", domain=FUSED_DOMAIN, types=GPU_FLOATS - {F32}, device="cuda",
        check=lambda node, graph: _check_mrotary(node, graph, F32), capture="device-indexed")
@kernel("MRotaryEmbedding", domain="com.microsoft", types=GPU_FLOATS, device="cuda", check=_check_mrotary,
        capture="device-indexed")
def m_rotary_embedding(rt, stream, input, position_ids, cos_cache, sin_cache, *, mrope_section, num_heads=0,
                       rotary_embedding_dim=0, interleaved=0, mrope_layout=0, is_packed_batching=0, scale=1.0,
                       _gpu_check=None):
    """The CPU kernel's shapes and checks; positions checked on the host when known there, else clamped and
    reported by the GPU. The fused domain's (plan/fusion.py rotary_in_float): a float16 or bfloat16 input and
    output, float32 caches, the rotation in float32 as the Casts around it that it replaces gave."""
    if cos_cache.dtype != input.dtype and (cos_cache.dtype != F32 or input.dtype == F32):
        raise ValueError(f"MRotaryEmbedding: cos/sin caches of {cos_cache.dtype} for an input of {input.dtype}")
    section = list(mrope_section)
    n, h, rot = mrotary_geometry(input.shape, position_ids.shape, cos_cache.shape, sin_cache.shape, num_heads,
                                 rotary_embedding_dim, section, mrope_layout)
    rows = cos_cache.shape[0]
    if position_ids.host is not None:
        cpu_attention.check_mrope_positions(position_ids.host, rows)
    four_d = len(input.shape) == 4
    seq = input.shape[2] if four_d else input.shape[1]
    y = rt.alloc(input.shape, input.dtype)
    check = gpu_check_fields(_gpu_check, rt, stream, f"MRotaryEmbedding: position_ids value {{value}} is out of range "
                                                  f"[0, {rows})")
    shape = struct_arg("MRotaryShape", batch=input.shape[0], seq=seq, heads=n, head_size=h, rot_half=rot // 2,
                       bnsh=int(four_d), cache_rows=rows, layout=mrope_layout, section_t=section[0],
                       section_h=section[1], section_w=section[2], interleaved=int(bool(interleaved)),
                       scale=float(scale), check=check)
    caches = "" if cos_cache.dtype == input.dtype else "_f32"
    rt.launch(f"seamless_mrotary_{SUFFIX[input.dtype]}{caches}", y.size, stream, ("int64", y.size), ("ptr", input.ptr),
              ("ptr", position_ids.ptr), ("ptr", cos_cache.ptr), ("ptr", sin_cache.ptr), ("ptr", y.ptr),
              shape)
    return (y,)


def _check_rotary_23(node, graph):
    if any(graph.value(name).dtype != graph.value(node.inputs[0]).dtype for name in node.inputs[1:3]):
        return "cos/sin caches of another type than the input"
    if len(node.inputs) > 3 and node.inputs[3] and graph.value(node.inputs[3]).dtype != np.int64:
        return "position_ids must be int64"
    return None


@kernel("RotaryEmbedding", since=23, types=GPU_FLOATS, device="cuda", check=_check_rotary_23,
        capture="device-indexed")
def rotary_embedding_23(rt, stream, x, cos_cache, sin_cache, position_ids=None, *, interleaved=0, num_heads=0,
                        rotary_embedding_dim=0, _gpu_check=None):
    """ONNX RotaryEmbedding: x (B, N, S, H) or (B, S, N*H) with num_heads; caches (P, rot/2) with
    position_ids (B, S), else (B, S, rot/2)."""
    if len(x.shape) == 4:
        b, n, s, h = x.shape
    elif num_heads and len(x.shape) == 3:
        b, s = x.shape[:2]
        n, h = num_heads, x.shape[2] // num_heads
        if n * h != x.shape[2]:
            raise ValueError(f"RotaryEmbedding: hidden size {x.shape[2]} is not a multiple of num_heads {n}")
    else:
        raise ValueError(f"RotaryEmbedding: a 4-D input, or a 3-D one with num_heads, expected; got shape {x.shape}")
    rot_half = (rotary_embedding_dim or h) // 2
    if cos_cache.shape[-1] != rot_half or 2 * rot_half > h:
        raise ValueError(f"cos/sin last dimension {cos_cache.shape[-1]} != rotary_embedding_dim/2 = {rot_half}, or "
                         f"the rotary dimension is above the head size {h}")
    return (_rotate(rt, stream, x, position_ids, cos_cache, sin_cache, b, s, n, h, rot_half, interleaved,
                    _gpu_check),)


# --- com.microsoft MultiHeadAttention -----------------------------------------------------


@kernel("MultiHeadAttention", domain="com.microsoft", types=frozenset([F32]), device="cuda", check=check_mha)
def multi_head_attention(rt, stream, query, key, value, bias=None, key_padding_mask=None, attention_bias=None,
                         past_key=None, past_value=None, past_sequence_length=None, cache_indirection=None, *,
                         num_heads, unidirectional=0, scale=0.0, mask_filter_value=-10000.0, _num_outputs=1):
    """Separate 3-D query, key and value (+ bias); present = past ++ new keys/values, (B, N, T, H)."""
    b, s, d = query.shape
    length, dv = key.shape[1], value.shape[2]
    n = num_heads
    mha_shapes(query, key, value, bias, key_padding_mask, past_key, past_value, n)
    sc = Scratch(rt, query, key, value, bias, key_padding_mask, attention_bias, past_key, past_value)

    def heads(x, offset, width, rows):  # (x + bias[offset:offset + width]) as (B, N, rows, width / N)
        if bias is not None:
            x = sc(binary(rt, stream, ADD, x, DeviceTensor(bias.ptr + offset * F32.itemsize, (width,), F32)))
        return sc(permuted(rt, stream, DeviceTensor(x.ptr, (b, rows, n, width // n), F32), [0, 2, 1, 3]))

    q, k, v = heads(query, 0, d, s), heads(key, d, d, length), heads(value, 2 * d, dv, length)
    p = past_key.shape[2] if past_key is not None else 0
    t = p + length
    fill, zero = sc(device_scalar(rt, stream, mask_filter_value)), sc(device_scalar(rt, stream, 0.0))
    masked = None  # (broadcast against (B, 1, S, T)) keys masked with mask_filter_value
    if key_padding_mask is not None:
        m = key_padding_mask
        if len(m.shape) == 1:  # right padding: valid lengths
            keys = sc(rt.device(DeviceTensor.on_host(np.arange(t, dtype=m.dtype).reshape(1, t)), stream))
            masked = sc(compare(rt, stream, GREATER_OR_EQUAL, keys, DeviceTensor(m.ptr, (b, 1), m.dtype)))
            masked = DeviceTensor(masked.ptr, (b, 1, 1, t), np.dtype(np.bool_))
        else:  # (B, L) or (B, T) raw 0/1 mask (the past's keys kept), or (B, S, T)
            if len(m.shape) == 2 and m.shape[1] == length and length != t:
                ones = sc(rt.device(DeviceTensor.on_host(np.ones((b, p), m.dtype)), stream))
                m = sc(concat(rt, stream, ones, m, axis=1)[0])
            masked = sc(compare(rt, stream, LESS_OR_EQUAL, m, sc(device_scalar(rt, stream, 0, m.dtype))))
            masked = DeviceTensor(masked.ptr, (b, 1, 1, t) if len(m.shape) == 2 else (b, 1, s, t), np.dtype(np.bool_))
    if unidirectional and s > 1:
        future = np.arange(t)[None, :] > (p + np.arange(s))[:, None]
        future = sc(rt.device(DeviceTensor.on_host(future), stream))
        masked = future if masked is None else sc(logic(rt, stream, LOGIC["Or"], masked, future)[0])
    add = sc(where(rt, stream, masked, fill, zero)[0]) if masked is not None else None
    if attention_bias is not None:
        add = attention_bias if add is None else sc(binary(rt, stream, ADD, attention_bias, add))
    out, present_k, present_v = (sc(x) for x in attention(rt, stream, q, k, v, add, past_key, past_value,
                                                          scale=scale if scale != 0.0 else None, _num_outputs=3))
    moved = sc(permuted(rt, stream, out, [0, 2, 1, 3]))  # (B, N, S, hv) -> (B, S, N * hv)
    results = [DeviceTensor(moved.ptr, (b, s, dv), F32), present_k, present_v]
    return sc.done(*results[:max(_num_outputs, 1)])
