"""OrtEp: partitions a graph (GetCapability) and compiles fused nodes (Compile)."""
from __future__ import annotations

import functools
import os
from collections import deque

import numpy as np

from ..graph.reader import read_graph
from ..partition import PartitionResult, partition
from ..exec.compute import CompiledKernel
from ..kernels import user as user_kernels
from ..runtime.native import LOG_ERROR, LOG_WARNING

# Recent partition results ((name, op) of every node, result), for onnxruntime_ep_seamless.partition_report().
PARTITIONS: deque = deque(maxlen=64)


SMALL_CONSTANT = 1024  # bytes of constant data GetCapability reads (checks may look at small constants)
ALL_CONSTANTS = 2**63 - 1


def dump_graph(native, graph, fused_node=None, const_limit=SMALL_CONSTANT):
    """One C walk of an OrtGraph, parsed into our IR (constants copied while ORT's memory is valid)."""
    ffi, lib = native.ffi, native.lib
    out, out_len = ffi.new("char**"), ffi.new("size_t*")
    native.check(lib.seamless_dump_graph(graph, fused_node if fused_node is not None else ffi.NULL,
                                         const_limit, out, out_len))
    try:
        data = bytes(ffi.buffer(out[0], out_len[0]))
    finally:
        lib.seamless_free(out[0])
    return read_graph(data, functools.partial(_copy_out, ffi))


COPY_SHARE = 1 << 24  # bytes from which a constant's copy is shared among threads


def _copy_out(ffi, addr: int, nbytes: int) -> np.ndarray:
    """nbytes of ORT's memory at addr, copied into a read-only array: memmove (3x the speed of bytes() of a cffi
    buffer), large ones in parts on the machine's cores (numpy's copy releases the GIL). ORT maps a model's
    external data file, so the copy's reads fault its pages in: one thread took 1.9 s for a 1.7B float16
    decoder's 3.4 GB on the H200's host (docs/benchmarks/gpu.md, fortieth session)."""
    out = np.empty(nbytes, np.uint8)
    threads = min(os.cpu_count() or 1, 16, nbytes // COPY_SHARE)
    if threads > 1:
        from concurrent.futures import ThreadPoolExecutor
        source = np.frombuffer(ffi.buffer(ffi.cast("char*", addr), nbytes), np.uint8)
        cuts = [nbytes * i // threads // 4096 * 4096 for i in range(threads)] + [nbytes]
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda a, b: np.copyto(out[a:b], source[a:b]), cuts[:-1], cuts[1:]))
    elif nbytes:
        ffi.memmove(ffi.from_buffer(out), ffi.cast("char*", addr), nbytes)
    out.flags.writeable = False
    return out


class Ep:
    def __init__(self, factory, options: dict, option_error: Exception | None, logger, device_ordinal: int = -1):
        self.factory = factory       # the factory outlives every EP it made
        self.native = factory.native
        self.device = factory.native.variant
        self.device_ordinal = device_ordinal
        self.name = factory.ep_name
        self.options = options
        self.option_error = option_error
        wanted = options.get("device_id")
        if option_error is None and self.device == "cuda" and device_ordinal < 0:
            self.option_error = ValueError(f"{self.name} runs a session on exactly one GPU: pass one of its OrtEpDevices "
                                           "(session_options(device='cuda') does)")
        elif option_error is None and wanted is not None and wanted != device_ordinal:
            self.option_error = ValueError(f"{self.name}: option device_id={wanted} but the session was given GPU "
                                           f"{device_ordinal}; pass that GPU's OrtEpDevice (session_options(device="
                                           f"'cuda', device_id={wanted}) does)")
        self.logger = logger

    def log(self, level: int, message: str) -> None:
        self.native.lib.seamless_log(self.logger, level, message.encode("utf-8", "replace"))

    def get_capability(self, graph_ptr, support_info) -> None:
        graph, _, _ = dump_graph(self.native, graph_ptr)
        if self.option_error is not None:
            # Bad options fail the session: claim one node, whatever it is, so that Compile raises the error
            # (a failed CreateEp or GetCapability only makes ORT run the graph elsewhere).
            if graph.nodes:
                self._fuse(graph_ptr, support_info, [0])
            else:
                self.log(LOG_ERROR, str(self.option_error))
            return
        result = partition(graph, self.device, self.native.lib.seamless_api_version())
        PARTITIONS.append((frozenset((n.name, n.key) for n in graph.nodes), result))
        if self.options.get("log_partition"):
            self.log(LOG_WARNING, result.summary(self.name))
        for group in result.groups:
            self._fuse(graph_ptr, support_info, group)
        # a custom op's node only the EP can run (its schema is the EP's): claimed, so that Compile fails with the
        # reason, not ORT with its placeholder kernel
        for node in graph.nodes:
            if (node.name, node.key) in result.declined and node.domain not in user_kernels.ORT_DOMAINS and \
                    any(k.domain == node.domain for k in user_kernels.custom_ops(self.device)):
                self._fuse(graph_ptr, support_info, [node.index])

    def _fuse(self, graph_ptr, support_info, group: list[int]) -> None:
        idx = self.native.ffi.new("int32_t[]", group)
        self.native.check(self.native.lib.seamless_fuse_nodes(graph_ptr, support_info, idx, len(group)))

    def compile(self, graph_ptr, fused_node_ptr) -> CompiledKernel:
        if self.option_error is not None:
            raise self.option_error
        graph, inputs, outputs = dump_graph(self.native, graph_ptr, fused_node_ptr, ALL_CONSTANTS)
        if self.device == "cuda":
            from ..exec.cuda_compute import CudaKernel
            return CudaKernel(self, graph, inputs, outputs)
        log = (lambda message: self.log(LOG_WARNING, message)) if self.options.get("log_partition") else None
        return CompiledKernel(self.native, self.name, graph, inputs, outputs, self.options.get("fusion", True),
                              self.options.get("native_program", True), log)


def declined_reasons(nodes: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Why each of `nodes` ((name, op) pairs) was declined, from the most recent partitioning of a graph holding it
    (a model with subgraphs is partitioned a graph at a time)."""
    reasons: dict[tuple[str, str], str] = {}
    left = set(nodes)
    for known, result in reversed(PARTITIONS):
        found = left & known
        if found:
            reasons.update((n, r) for n, r in result.declined.items() if n in found)
            left -= found
    return reasons
