"""A fused node compiled for the CUDA EP: constants uploaded once, kernels launched on ORT's stream.

Values live in device memory from the CUDA runtime's cache (no driver allocation in steady
state); the partition's outputs are copied device-to-device into the tensors ORT allocates. With
capture=auto a node without seams is captured as a CUDA graph per binding of its input shapes
(growing KV axes padded to a capacity where exec/cuda_capture.choose_padding allows it: at their end,
or at their start once a padded run matched the unpadded one) and launched from then on, staging
inputs and outputs by a table rewritten per run. With capture=off (and native_program=1) the same run is
recorded instead as a launch program: its launches, copies and GEMMs in order, issued one by one from C
(ep_plugin/cuda_capture.c), so no CUDA graph is made. Each segment's plan is registered with the C glue
(ep_plugin/cuda_replay.c), which answers the binding's later Computes without Python.
"""
from __future__ import annotations

import bisect
import functools
import math
import threading
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..graph.ir import ONNX_TO_NUMPY
from ..kernels.checks import gpu_check_arg
from ..kernels.cpu.control import scan_output_axis
from ..runtime.cuda import CudaRuntime, DeviceTensor, contiguous_strides
from ..runtime.cuda_args import STAGE_COPY
from .cuda_capture import (MAX_PROMPT, MIN_CAPACITY, MIN_PROMPT, capture_summary, choose_padding, condition_passes,
                           place, prompt_padding, with_real_lengths)
from .compute import MAX_RANK, Buffers, host_array
from ..runtime.native import LOG_WARNING, NATIVES


WARMUP_RUNS = 2     # capture=auto: eager runs of a binding before it is captured
MAX_SEGMENTS = 8    # captured bindings per compiled node; the least recently used is dropped
STAGE_LIMIT = 1 << 22  # outputs from 4 MiB on are copied by cuMemcpyAsync, not the staging kernel


@dataclass
class Segment:
    """A captured Compute for one binding of the input shapes (with growing axes padded to
    `capacity` when the partition allows it). The graph copies ORT's inputs into `inputs` and runs the
    partition; a staging launch after it copies the results into ORT's outputs, as the staging table
    tells both: the table is rewritten at each launch, so new addresses and lengths need no recapture."""
    graph: object          # the C handle (cuda_capture.c)
    stream: object         # replayed only on the stream it was captured on (its buffers are reused)
    capacity: int          # the padded length of growing axes; 0: nothing padded
    padding: object        # the cuda_capture.Padding `capacity` is of (a decode step's or a first prompt's), or None
    inputs: list           # DeviceTensors the graph reads, one per staged input
    table: DeviceTensor    # [staged inputs + outputs] StageCopy entries (native/cuda/args.h) on the GPU
    host_table: np.ndarray  # its host copy
    in_pos: np.ndarray     # the staged inputs' positions among the node's inputs
    in_length: np.ndarray  # per staged input: index in the run's dims of its padded length (else of a 1)
    in_unit: np.ndarray    # bytes per unit of that length
    out_length: np.ndarray  # [outputs, k]: indices in the run's dims of the input lengths whose largest it has
    out_unit: np.ndarray
    out_ranks: np.ndarray
    out_dims: np.ndarray   # [outputs * MAX_RANK]; padded axes rewritten per run
    out_axis: np.ndarray   # indices in out_dims of the padded axes
    out_padded: np.ndarray  # the outputs they belong to
    # padded at the start (Padding.left): per run, the padding is capacity - the longest growing input
    in_lead: np.ndarray    # per staged input: bytes of its zero lead per unit of padding (0: not padded)
    out_full: np.ndarray   # per output: its captured length on the padded axis (0 when not padded)
    out_src: np.ndarray    # per output: the captured buffer (its unpadded part starts later by the padding)
    plan: object = None    # the C glue's SeamlessSegment over these arrays (_plan); what it points at is in `kept`
    kept: list = None


# compiled nodes the garbage collector found while their thread captured a CUDA graph (CudaKernel.__del__)
_UNRELEASED: list = []


def segment_replays() -> int:
    """Captured segments launched in this process (capture=auto), by the C glue or from Python."""
    return int(NATIVES["cuda"].lib.seamless_segment_replays())


class CudaKernel:
    compute_calls = 0      # Python Computes of every CUDA fused node: replays (session or segment) make none

    def __init__(self, ep, graph, input_names: list[str], output_names: list[str]):
        self.native, self.ep_name, self.logger = ep.native, ep.name, ep.logger  # not ep: no reference cycle
        if ep.device_ordinal < 0:
            raise RuntimeError("the CUDA EP was created without a CUDA device")
        self.rt = CudaRuntime.get(ep.native, ep.device_ordinal)
        self.name = "+".join(sorted({n.op_type for n in graph.nodes}))[:80] if len(graph.nodes) > 1 else graph.nodes[0].label
        self.input_names, self.output_names = input_names, output_names
        placed = place(graph, input_names, output_names, ep.options.get("fusion", True))
        self.constants = _upload_constants(self.rt, graph, placed, input_names, output_names)
        self.held = list(self.constants.values())  # every constant of the node's, its If branches' too: never freed
        self.padding, why_not = choose_padding(graph, placed, input_names, output_names)
        self.prompt, why_not_prompt = prompt_padding(graph, placed, input_names, output_names)
        self.log_capture = ep.options.get("log_capture")
        if self.log_capture:
            ep.log(LOG_WARNING, capture_summary(placed, f"{ep.name} fused node {self.name!r}", self.padding, why_not,
                                                self.prompt, why_not_prompt))
        position = {name: j for j, name in enumerate(output_names)}
        self.steps = self._build(graph, placed, lambda node: functools.partial(
            self._output_buffer, [position.get(n) for n in node.outputs]))
        self.dead_after = last_uses(self.steps, output_names)
        self.prompt_steps = with_real_lengths(self.steps, self.prompt) if self.prompt is not None else self.steps
        self.prompt_dead_after = last_uses(self.prompt_steps, output_names)
        self.held_addresses = frozenset(t.ptr for t in self.held if t.ptr)  # the branches' constants added by _build
        self.out_dtypes = [graph.value(n).dtype for n in output_names]
        self._tls = threading.local()
        # capture=auto: a node without seams is captured whole, per binding of its input shapes; capture=off (with
        # native_program=1) records the same as a launch program, which C issues launch by launch: no CUDA graph. A
        # user's CUDA kernel launches through its own library, which a program cannot record.
        mode = ep.options.get("capture")
        unlisted = [s for s in placed if (s.kdef.user and s.on_gpu) or s.conditional]
        self.listed = mode == "off" and ep.options.get("native_program", True) and not unlisted
        if mode == "off" and ep.options.get("native_program", True) and unlisted and self.log_capture:
            ep.log(LOG_WARNING, f"{ep.name} fused node {self.name!r}: capture=off runs it through Python: a launch "
                                f"program cannot hold {unlisted[0].node.label!r} ({unlisted[0].node.key}: a user's "
                                "CUDA kernel, or control flow decided on the GPU)")
        # under session capture (enable_cuda_graph=1) too: runs ORT does not capture (gpu_graph_id -1, a prompt)
        self.capture = (mode == "auto" or self.listed) and not any(s.seam for s in placed)
        # the C glue's SeamlessReplayer: launches captured segments for later Computes (abi/bridge.py hands it to ORT's
        # compute info as the node's native runner)
        self.replayer = self.native_runner = None
        self.prompt_at = None  # where a run's dims hold its prompt's lengths (self.prompt's axes)
        if self.capture:
            ffi, lib = self.native.ffi, self.native.lib
            grow_at = np.array([input_names.index(n) * MAX_RANK + a for n, a in self.padding.inputs.items()]
                               if self.padding else [], np.int64)  # where a run's dims hold the padded lengths
            self.replayer = lib.seamless_replayer_new(len(input_names), MAX_RANK, ffi.from_buffer("int64_t[]", grow_at),
                                                      len(grow_at), int(bool(self.padding and self.padding.left)),
                                                      MIN_CAPACITY)
            if self.replayer == ffi.NULL:
                raise MemoryError("out of host memory for the capture's replayer")
            if self.prompt is not None:
                at = lambda axes: np.array([input_names.index(n) * MAX_RANK + a for n, a in axes.items()], np.int64)
                prompt_at, past_at = at(self.prompt.inputs), at(self.prompt.past)
                self.prompt_at = prompt_at
                if lib.seamless_replayer_prompts(self.replayer, ffi.from_buffer("int64_t[]", prompt_at), len(prompt_at),
                                                 ffi.from_buffer("int64_t[]", past_at), len(past_at), MIN_PROMPT,
                                                 MAX_PROMPT):
                    lib.seamless_replayer_free(self.replayer)
                    raise MemoryError("out of host memory for the capture's replayer")
            self.native_runner = self.replayer
            self.grow_at = grow_at
        self.segments: dict = {}
        self.seen: Counter = Counter()
        self.failed: set = set()  # bindings whose capture failed: they run eagerly
        self.checked: set = set()  # left-padded bindings whose padded run matched the unpadded one
        self.pending: set = set()  # bindings a thread is capturing (or checking) now: no other thread captures them
        self._lock = threading.Lock()

    def _build(self, graph, placed, output_buffer) -> list:
        """The steps the executor runs: (node, its kernel's callable, on the GPU, its host inputs); the subgraphs of
        an If, a Loop or a Scan compiled into Branch objects, bound in place of its graph attributes."""
        steps = []
        for s in placed:
            branches = None
            if s.branches is not None:
                outer = s.node.inputs[len(s.node.inputs) - s.node.implicit:]
                subgraphs = s.node.subgraphs
                branches = {attr: Branch(self, subgraphs[attr], sub, list(subgraphs[attr].inputs) + outer)
                            for attr, sub in s.branches.items()}
            steps.append((s.node, s.kdef.build(s.node, graph, s.readers, output_buffer(s.node), branches), s.on_gpu,
                          frozenset(s.kdef.host_inputs)))
        return steps

    def _buffers(self):
        b = getattr(self._tls, "b", None)
        if b is None:
            ffi, n_in, n_out = self.native.ffi, len(self.input_names), len(self.output_names)
            b = self._tls.b = Buffers(ffi, n_in, n_out)
            b.np_in_data = np.frombuffer(ffi.buffer(b.in_data), np.int64)[:n_in]
            b.np_in_dims = np.frombuffer(ffi.buffer(b.in_dims), np.int64)[:n_in * MAX_RANK]
            b.np_out_data = np.frombuffer(ffi.buffer(b.out_data), np.int64)[:n_out]
            b.stream = ffi.new("void**")
            b.on_host = ffi.new("uint8_t[]", max(n_in, 1))
            if self.replayer is not None:
                b.key = ffi.new("uint8_t[]", self.native.lib.seamless_replay_key_size(self.replayer))
        return b

    def compute(self, ctx) -> None:
        lib, check = self.native.lib, self.native.check
        b = self._buffers()
        check(lib.seamless_compute_stream(ctx, b.stream))
        stream = b.stream[0]
        if _UNRELEASED and not lib.seamless_capturing():
            _release_collected()
        check(lib.seamless_capture_begin(stream))  # a session graph capture starts on this stream
        CudaKernel.compute_calls += 1
        if lib.seamless_get_inputs(ctx, len(self.input_names), b.in_data, b.in_nbytes, b.in_types, b.in_ranks,
                                   b.in_dims, MAX_RANK, b.changed, b.status) < 0:
            check(b.status[0])
        lib.seamless_inputs_on_host(ctx, len(self.input_names), b.on_host)
        if any(b.on_host[0:len(self.input_names)]) and self.capture:  # where ORT leaves a value is fixed by its plan
            self.capture = False  # uploaded per run (_inputs): no segment replays host memory as device memory
        inputs = None
        if self.capture and not lib.seamless_capturing():
            key, capacity, padding = self._binding(b)
            with self._lock:  # held while launching: another thread may not drop the segment or rewrite its table
                segment = self.segments.get(key)
                if len(self.seen) > 4096:  # shapes that keep changing (an unpadded growing KV) are never captured
                    self.seen.clear()
                self.seen[key] += 1
                if segment is not None and segment.stream == stream:
                    return self._launch(segment, ctx, b, stream)
                due = (segment is None and self.seen[key] > WARMUP_RUNS and key not in self.failed
                       and key not in self.pending and not self._long_prompt(b))
                if due:  # this thread's: another thread running the binding meanwhile runs it eagerly
                    self.pending.add(key)
            if due:
                try:
                    inputs = self._inputs(b)
                    if capacity and padding.left and key not in self.checked:
                        return self._check_left_padding(key, capacity, inputs, ctx, b, stream)
                    try:
                        return self._capture(key, capacity, padding, inputs, ctx, b, stream)
                    except Exception as e:  # not capturable after all (or a bad input): this binding runs eagerly
                        with self._lock:
                            self.failed.add(key)
                        if self.log_capture:  # some bindings are expected not to capture (a batched prompt, padded KV)
                            self._warn(f"{self.ep_name} fused node {self.name!r}: {self._mode} could not capture "
                                       f"inputs of shapes {[t.shape for t in inputs.values()]}, which run eagerly from "
                                       f"now on: {e}")
                finally:
                    with self._lock:
                        self.pending.discard(key)
        inputs = inputs or self._inputs(b)
        scratch, ort_outputs = [], []
        self._tls.run = (ctx, b, ort_outputs)  # kernels may write outputs into ORT's tensors (_output_buffer)
        try:
            results = self._run(dict(self.constants, **inputs), stream, scratch)
            self._write_outputs(ctx, b, results, stream)
        finally:
            self._tls.run = None
            # back to the cache: later work on this stream is ordered after this run's kernels
            _release(self.rt, scratch, list(inputs.values()) + ort_outputs, self.held_addresses)

    def _output_buffer(self, positions: list, i: int, shape: tuple, dtype) -> DeviceTensor | None:
        """ORT's tensor for output i of a node (positions: each output's index among the partition's
        outputs, or None), asked of ORT now with that shape, where the node's output is one of the
        partition's and this run writes ORT's outputs itself (not a captured segment's staging); else None."""
        run = getattr(self._tls, "run", None)
        j = positions[i] if i < len(positions) else None
        if run is None or j is None or not all(shape):
            return None
        ctx, b, ort_outputs = run
        b.out_ranks[0:j] = [-1] * j  # only output j is asked for
        b.out_ranks[j] = len(shape)
        b.out_dims[j * MAX_RANK:j * MAX_RANK + len(shape)] = shape
        self.native.check(self.native.lib.seamless_get_outputs(ctx, j + 1, b.out_ranks, b.out_dims, MAX_RANK,
                                                               b.out_data))
        t = DeviceTensor(int(b.np_out_data[j]), tuple(shape), np.dtype(dtype))
        ort_outputs.append(t)
        return t

    def _inputs(self, b) -> dict[str, DeviceTensor]:
        inputs = {}
        for i, name in enumerate(self.input_names):
            rank = b.in_ranks[i]
            if rank >= 0:
                shape, dtype = tuple(b.in_dims[i * MAX_RANK:i * MAX_RANK + rank]), ONNX_TO_NUMPY[b.in_types[i]]
                if b.on_host[i]:  # host memory (an If's output on ORT's CPU EP): copied, uploaded where read
                    ffi = self.native.ffi
                    inputs[name] = DeviceTensor.on_host(
                        host_array(ffi, ffi.cast("char*", b.in_data[i]), b.in_nbytes[i], dtype, shape).copy())
                else:
                    inputs[name] = DeviceTensor(int(b.np_in_data[i]), shape, dtype, settled=True)
        return inputs

    def _long_prompt(self, b) -> bool:
        """A run of more than MAX_PROMPT tokens a prompt: never captured. Its GPU time hides the launches a replay
        saves, while a capture keeps its run's memory with the graph for good (a 32000-token prompt of the 1B shape,
        before captures reused what their run freed: 40 -> 67 GB on its third run; docs/benchmarks/gpu.md, session
        54)."""
        return self.prompt_at is not None and len(self.prompt_at) > 0 and \
            int(b.np_in_dims[self.prompt_at].max()) > MAX_PROMPT

    def _binding(self, b) -> tuple[bytes, int, object]:
        """This run's segment key, as the C glue computes it (seamless_replay_key: the input shapes and
        types, growing lengths replaced by their padded lengths), the capacity (0: not padded) and the
        Padding it is of (a first prompt's, self.prompt, or a decode step's, self.padding)."""
        prompt = self.native.ffi.new("int32_t*")
        capacity = self.native.lib.seamless_replay_key(self.replayer, b.in_dims, b.in_ranks, b.in_types, b.key, prompt)
        return bytes(self.native.ffi.buffer(b.key)), int(capacity), self.prompt if prompt[0] else self.padding

    def _run(self, values: dict, stream, scratch: list, prompt: bool = False) -> list[DeviceTensor]:
        """Every step on `values` (constants and inputs; `prompt`: a first prompt padded by self.prompt); the
        outputs, on the GPU. What kernels allocate is appended to `scratch`."""
        if any(t.settled for t in values.values()):
            self.rt.begin_run(stream)
        steps, dead_after = (self.prompt_steps, self.prompt_dead_after) if prompt else (self.steps, self.dead_after)
        results = run_steps(self.rt, steps, values, self.output_names, stream, scratch, dead_after,
                            self.held_addresses)
        results = [_on_gpu(self.rt, t, stream, scratch) for t in results]
        for name, t, dtype in zip(self.output_names, results, self.out_dtypes):
            if t.dtype != dtype:
                raise TypeError(f"output {name!r}: kernel produced {t.dtype}, graph declares {dtype}")
        return results

    def _write_outputs(self, ctx, b, results: list[DeviceTensor], stream) -> None:
        """Copy the results into the tensors ORT allocates: the small ones by one staging launch (its
        table uploaded on the stream; under session capture the graph keeps the table), large ones
        by the copy engines."""
        for i, t in enumerate(results):
            b.out_ranks[i] = len(t.shape)
            b.out_dims[i * MAX_RANK:i * MAX_RANK + len(t.shape)] = t.shape
        self.native.check(self.native.lib.seamless_get_outputs(ctx, len(results), b.out_ranks, b.out_dims, MAX_RANK,
                                                               b.out_data))
        copied = [i for i, t in enumerate(results) if t.ptr != int(b.np_out_data[i])]  # not already in ORT's tensor
        small = [i for i in copied if results[i].nbytes < STAGE_LIMIT]
        for i in copied:
            if results[i].nbytes >= STAGE_LIMIT:
                self.rt.copy(int(b.np_out_data[i]), results[i].ptr, results[i].nbytes, stream)
        if small:
            table = np.zeros(len(small), STAGE_COPY)
            table["src"] = [results[i].ptr for i in small]
            table["dst"] = b.np_out_data[small]
            table["rows"] = 1
            for field in ("width", "src_pitch", "dst_pitch"):
                table[field] = [results[i].nbytes for i in small]
            staged = self.rt.device(DeviceTensor.on_host(table), stream)
            self.rt.stage(staged, 0, len(small), stream, largest=int(table["width"].max()))
            self.rt.free(staged)  # stream-ordered

    def _capture(self, key, capacity: int, padding, inputs: dict, ctx, b, stream) -> None:
        """Capture this Compute for the binding `key` (the inputs' staging and the partition; growing axes padded
        to `capacity` by `padding`), then launch it."""
        ffi, lib, rt = self.native.ffi, self.native.lib, self.rt
        names = list(inputs)
        stable = {name: rt.alloc(self._padded_shape(name, t, capacity, b, padding), t.dtype)  # the graph's own copies
                  for name, t in inputs.items()}
        for t in stable.values():  # staged before the run's first launch, a plain one: kernels may read them early
            t.settled = True
        table = rt.alloc((len(names) + len(self.output_names),), STAGE_COPY)
        handle = ffi.new("void**")
        self.native.check(lib.seamless_segment_begin(stream, int(self.listed), handle))
        graph, scratch = handle[0], []
        try:
            with rt.capture_pool():  # the run's frees serve its later allocations; all kept by the graph
                largest = max([t.nbytes for t in stable.values()] or [0])
                rt.stage(table, 0, len(names), stream, largest)
                results = self._run(dict(self.constants, **stable), stream, scratch, padding is self.prompt)
                _release(rt, scratch, list(stable.values()), self.held_addresses)  # the graph's: replays reuse them
            self.native.check(lib.seamless_segment_end(graph, 1))
            if self.listed and self.log_capture:
                self._warn(f"{self.ep_name} fused node {self.name!r}: inputs of shapes "
                           f"{[t.shape for t in inputs.values()]} recorded as a launch program of "
                           f"{lib.seamless_segment_steps(graph)} steps")
            segment = self._segment(graph, stream, capacity, padding, names, stable, results, table)
            self._plan(segment, key, results)
        except BaseException:
            if lib.seamless_capturing():
                lib.seamless_segment_end(graph, 0)
            lib.seamless_segment_release(rt.ordinal, graph)
            for t in list(stable.values()) + [table]:
                rt.free(t)
            raise
        with self._lock:
            while len(self.segments) >= MAX_SEGMENTS:  # the least recently launched goes
                self._drop(self.segments.pop(min(self.segments, key=lambda k: self.segments[k].plan.used)))
            self.segments[key] = segment
            if lib.seamless_replay_add(self.replayer, segment.plan) < 0:
                raise RuntimeError("more captured segments than the C glue holds")  # cannot happen: dropped above
            self._launch(segment, ctx, b, stream)
        if _UNRELEASED:  # collected while capturing: the binding's later runs may never enter Python again
            _release_collected()

    def _padded_shape(self, name, t: DeviceTensor, capacity: int, b, padding) -> list:
        """The shape of input `name` padded by `padding` for a run (b: its buffers) with this capacity."""
        shape = list(t.shape)
        axis = padding.inputs.get(name) if capacity else None
        if axis is not None:
            shape[axis] = shape[axis] + self._lead(capacity, b.np_in_dims) if padding.left else capacity
        return shape

    def _lead(self, capacity: int, dims) -> int:
        """Left padding: positions added at the start of every growing input's axis in this run."""
        return capacity - int(dims[self.grow_at].max())

    def _check_left_padding(self, key, capacity: int, inputs: dict, ctx, b, stream) -> None:
        """A left-padded binding's first run after warm-up: unpadded (ORT gets these outputs) and
        padded, compared byte for byte. Equal: the binding is captured on its next run; different
        (the model computes positions from its shapes, or a prompt's products went through cuBLASLt,
        whose sums depend on the length): the binding runs eagerly from now on."""
        rt, scratch = self.rt, []
        try:
            results = self._run(dict(self.constants, **inputs), stream, scratch)
            try:
                problem = self._padded_difference(inputs, results, capacity, b, stream, scratch)
            except Exception as e:  # the padded shapes do not fit the model: as good as a difference
                problem = f"the padded run failed: {e}"
            self._write_outputs(ctx, b, results, stream)
        finally:
            _release(rt, scratch, list(inputs.values()), self.held_addresses)
        with self._lock:
            (self.failed if problem else self.checked).add(key)
        if self.log_capture:
            shapes = [t.shape for t in inputs.values()]
            self._warn(f"{self.ep_name} fused node {self.name!r}: {self._mode}, inputs of shapes {shapes} padded at "
                       f"their start to {capacity}: " + (f"not captured, they run eagerly: {problem}" if problem else
                                                         "the padded run matches the unpadded one; captured from the "
                                                         "next run"))

    def _padded_difference(self, inputs: dict, results: list, capacity: int, b, stream, scratch: list) -> str:
        """Run the node on its inputs padded at their start; how its outputs differ from `results`
        (those of the unpadded run), "" when they are the same bytes."""
        rt, values = self.rt, {}
        lead = self._lead(capacity, b.np_in_dims)
        for name, t in inputs.items():
            axis = self.padding.inputs.get(name)
            if axis is None:
                values[name] = t
                continue
            y = rt.alloc(self._padded_shape(name, t, capacity, b, self.padding), t.dtype)
            scratch.append(y)
            rt.zero(y, stream)
            if t.nbytes:
                strides = contiguous_strides(y.shape)
                rt.strided_copy(stream, t, y, t.shape, contiguous_strides(t.shape), strides,
                                dst_offset=lead * strides[axis])
            values[name] = y
        padded = self._run(dict(self.constants, **values), stream, scratch)
        for name, want, got in zip(self.output_names, results, padded):
            want, got = rt.to_host(want, stream), rt.to_host(got, stream)
            if name in self.padding.outputs:
                axis = self.padding.outputs[name][0]
                got = got[(slice(None),) * axis + (slice(lead, None),)]
            if got.shape != want.shape or got.tobytes() != want.tobytes():
                return f"output {name!r} of the padded run differs from the unpadded run's"
        return ""

    def _segment(self, graph, stream, capacity, padding, names, stable, results, table) -> Segment:
        """The staging plan of a captured run: what each launch rewrites in the table."""
        no_length = len(self.input_names) * MAX_RANK  # past a run's dims: a length of 1 (cuda_replay.c dim_at)
        padded_in = padding.inputs if capacity else {}
        padded_out = padding.outputs if capacity else {}
        left = bool(capacity) and padding.left
        host = np.zeros(len(names) + len(results), STAGE_COPY)
        in_length, in_unit, in_lead = [], [], []
        for k, name in enumerate(names):
            t, axis = stable[name], padded_in.get(name)
            if axis is None:
                rows, unit, length, full = 1, t.nbytes, no_length, 1
            else:
                rows, unit = math.prod(t.shape[:axis]), math.prod(t.shape[axis + 1:]) * t.dtype.itemsize
                length, full = self.input_names.index(name) * MAX_RANK + axis, t.shape[axis]
            host[k]["dst"], host[k]["rows"], host[k]["dst_pitch"] = t.ptr, rows, unit * full
            in_length.append(length)
            in_unit.append(unit)
            in_lead.append(unit if left and axis is not None else 0)
        out_length, out_unit, out_axis, out_padded, out_full = [], [], [], [], []
        out_dims = np.zeros(len(results) * MAX_RANK, np.int64)
        for j, (name, t) in enumerate(zip(self.output_names, results)):
            out_dims[j * MAX_RANK:j * MAX_RANK + len(t.shape)] = t.shape
            row = host[len(names) + j]
            if name not in padded_out:
                row["src"], row["rows"], row["src_pitch"] = t.ptr, 1, t.nbytes
                out_length.append([no_length])
                out_unit.append(t.nbytes)
                out_full.append(0)
                continue
            axis, sources = padded_out[name]
            if not left and t.shape[axis] < capacity:  # (longer: a shared KV buffer, staged back whole)
                raise ValueError(f"output {name!r} of shape {t.shape} is not padded to the capacity {capacity}")
            unit = math.prod(t.shape[axis + 1:]) * t.dtype.itemsize
            row["src"], row["rows"], row["src_pitch"] = t.ptr, math.prod(t.shape[:axis]), unit * t.shape[axis]
            out_length.append([self.input_names.index(n) * MAX_RANK + a for n, a in sources] or [no_length])
            out_unit.append(unit)
            out_axis.append(j * MAX_RANK + axis)
            out_padded.append(j)
            out_full.append(t.shape[axis])
        array = lambda v, t=np.int64: np.array(v, t)
        k = max(len(i) for i in out_length)
        out_length = [i + i[:1] * (k - len(i)) for i in out_length]  # repeated: the largest is the same
        return Segment(graph, stream, capacity, padding if capacity else None, [stable[n] for n in names], table, host,
                       array([self.input_names.index(n) for n in names]), array(in_length), array(in_unit),
                       array(out_length).reshape(len(results), k), array(out_unit),
                       array([len(t.shape) for t in results], np.int32), out_dims, array(out_axis), array(out_padded),
                       array(in_lead) if left else None, array(out_full),
                       host["src"][len(names):].astype(np.int64))

    def _plan(self, s: Segment, key: bytes, results: list) -> None:
        """The C glue's SeamlessSegment for s (ep_plugin/cuda_replay.c): pointers into s's arrays, the
        outputs' staging launch prepared once; s.kept holds what they point at."""
        ffi, rt = self.native.ffi, self.rt
        p, lengths = ffi.new("SeamlessSegment*"), np.zeros(len(results), np.int64)
        out_data = ffi.new("void*[]", 1 + len(results))  # ORT's outputs of a run
        s.plan, s.kept = p, [lengths, out_data]

        def view(array, ctype="int64_t[]"):
            s.kept.append(ffi.from_buffer(ctype, array))
            return s.kept[-1]

        p.graph, p.stream, p.capacity, p.n_dims = s.graph, s.stream, s.capacity, len(self.input_names) * MAX_RANK
        p.n_in, p.n_out, p.k, p.n_axis = len(s.in_pos), len(results), s.out_length.shape[1], len(s.out_axis)
        p.n_grow, p.max_rank = (len(self.grow_at) if s.capacity else 0), MAX_RANK
        p.host, p.table = view(s.host_table, "char[]"), s.table.ptr
        p.in_pos, p.in_length, p.in_unit = view(s.in_pos), view(s.in_length), view(s.in_unit)
        p.in_lead = view(s.in_lead) if s.in_lead is not None else ffi.NULL
        p.out_length, p.out_unit, p.out_full = view(s.out_length), view(s.out_unit), view(s.out_full)
        p.out_src, p.out_axis, p.out_padded = view(s.out_src), view(s.out_axis), view(s.out_padded)
        p.grow_at = view(self.grow_at) if s.capacity else ffi.NULL
        p.out_ranks, p.out_dims, p.lengths = view(s.out_ranks, "int32_t[]"), view(s.out_dims), view(lengths)
        p.out_data = out_data
        if results:
            staging = rt.staging(s.table, p.n_in, p.n_out, max(t.nbytes for t in results), prepare=True)
            fn, p.gx, p.gy, p.block, p.shared, packed, offsets, p.count = staging
            p.fn, p.packed, p.offsets, p.dependent = fn, view(packed, "char[]"), offsets, int(rt.dependent)
            p.packed_size = len(packed)
            s.kept.append(offsets)
        p.key = view(key, "uint8_t[]")

    def _launch(self, s: Segment, ctx, b, stream) -> None:
        """Launch segment s for this run (with self._lock held), as the C glue does for later runs."""
        self.native.check(self.native.lib.seamless_segment_replay(self.replayer, s.plan, ctx, stream, b.in_dims,
                                                                  b.in_data))

    @property
    def _mode(self) -> str:
        return "capture=off (a launch program)" if self.listed else "capture=auto"

    def _warn(self, message: str) -> None:
        try:
            self.native.lib.seamless_log(self.logger, LOG_WARNING, message.encode("utf-8", "replace"))
        except Exception:  # a log that fails must not fail the run
            pass

    def _drop(self, segment: Segment) -> None:
        self.native.lib.seamless_replay_remove(self.replayer, segment.plan)  # no Compute launches it from now on
        self.native.lib.seamless_segment_release(self.rt.ordinal, segment.graph)
        for t in segment.inputs + [segment.table]:
            self.rt.free(t)

    def __del__(self):
        try:
            if self.native.lib.seamless_capturing():  # in a capture: the release's device sync would end it
                _UNRELEASED.append(self)  # released after the capture, or by the next Compute in Python
                return
            self._release_memory()
        except Exception:  # interpreter shutdown: the process releases the GPU anyway
            pass

    def _release_memory(self) -> None:
        for segment in getattr(self, "segments", {}).values():
            self._drop(segment)
        if getattr(self, "replayer", None) is not None:
            self.native.lib.seamless_replayer_free(self.replayer)
            self.replayer = None
        self._release_constants()

    def _release_constants(self) -> None:
        """The node's weights, and the layouts kernels made of them (DeviceTensor.derived), back to the
        allocator's cache once every run that may read them has finished on the GPU: a released session's
        memory serves the next one."""
        held = getattr(self, "held", None)
        if not held:
            return
        self.native.check(self.native.lib.seamless_cuda_device_sync(self.rt.ordinal))
        for t in held:
            for derived in (t.derived or {}).values():
                self.rt.free(derived)
            self.rt.free(t)
        held.clear()
        self.constants.clear()


def _release_collected() -> None:
    """Release the nodes CudaKernel.__del__ left in _UNRELEASED (another thread may be taking them too)."""
    while True:
        try:
            node = _UNRELEASED.pop()
        except IndexError:
            return
        node._release_memory()


def _release(rt, scratch, inputs, held: frozenset):
    """Free what kernels allocated; aliases (same address as an input, a constant (`held`: the constants' addresses)
    or an earlier value) are not allocations."""
    _free_once(rt, scratch, addresses(inputs) | held, set())


def _upload_constants(rt, graph, placed, input_names, output_names) -> dict:
    """The constants the placed steps read (not the weights a fusion replaced) and the graph's outputs that are
    constants (an If branch whose nodes ORT folded into initializers), on the GPU."""
    read = {name for s in placed for name in s.node.inputs} | set(output_names)
    return {name: rt.upload(v.const) for name, v in graph.values.items()
            if v.const is not None and name not in input_names and name in read}


def _on_gpu(rt, t: DeviceTensor, stream, scratch: list) -> DeviceTensor:
    """t on the GPU: a host value uploaded once (the upload appended to scratch)."""
    if not t.ptr and t.nbytes:
        t = rt.device(t, stream)
        scratch.append(t)
    return t


def last_uses(steps: list, output_names: list) -> list[tuple]:
    """For each step of run_steps, the values steps compute whose last reader it is (or, read by none, their
    step), outputs apart: their memory can go back to the cache once the step is issued."""
    produced, last = set(), {}
    for k, (node, *_) in enumerate(steps):
        last.update((n, k) for n in node.inputs if n)
        for n in node.outputs:
            if n:
                produced.add(n)
                last.setdefault(n, k)
    dead = [[] for _ in steps]
    for name, k in last.items():
        if name in produced and name not in output_names:
            dead[k].append(name)
    return [tuple(d) for d in dead]


def run_steps(rt, steps: list, values: dict, output_names: list, stream, scratch: list,
              dead_after: list | None = None, held: frozenset = frozenset()) -> list[DeviceTensor]:
    """Run the executor's steps (CudaKernel._build) on `values` (constants and inputs, by name; values the steps
    compute are added); the outputs, where they are (a host value stays on the host). What kernels allocate, and
    uploads, are appended to `scratch`. With dead_after (last_uses), memory the steps allocated goes back to the
    cache (stream-ordered: only later work on this stream reuses it) once no value still to be read lies in it,
    so that a run holds its live values, not all of them (a 32000-token prompt of the 1B shape took 40 GB); `held`:
    addresses never freed (the node's constants, its branches' too)."""
    def on_gpu_value(name):
        t = _on_gpu(rt, values[name], stream, scratch)
        if t is not values[name]:  # a host value uploaded: freed after the run
            values[name] = t
            given.add(t.ptr)
            bisect.insort(outside, (t.ptr, t.ptr + max(t.nbytes, 1), id(t), t))
        return t

    given = {t.ptr for t in values.values()} | held  # inputs, constants: never ours to free
    outside = sorted((t.ptr, t.ptr + max(t.nbytes, 1), id(t), t) for t in values.values() if t.ptr)  # their memory
    roots: dict[int, list] = {}  # memory steps returned: its address -> [the tensor, its end, values not yet dead]
    starts: list[int] = []  # the roots' addresses, sorted (roots do not overlap)
    root_of: dict[str, int] = {}
    freed: dict[int, int] = {}  # an address freed here -> scratch's length then (entries before it: gone)

    def adopt(name, t):
        """A value in a root's memory (a view, or the root itself) keeps it (`name`: "" for an unnamed output);
        a view inside a root or a given value that no kernel gave a base (a Reshape of a Split's piece) gets it,
        so that it is freed as its base, never as an address inside another allocation."""
        i = bisect.bisect_right(starts, t.ptr) - 1
        if i >= 0 and t.ptr < roots[starts[i]][1]:
            root = roots[starts[i]][0]
            if t.base is None and t is not root and (t.ptr, t.nbytes) != (root.ptr, root.nbytes):
                t.base = root.base or root
            if name:
                roots[starts[i]][2] += 1
                root_of[name] = starts[i]
            return
        j = bisect.bisect_right(outside, (t.ptr, math.inf)) - 1
        if j >= 0 and t.ptr < outside[j][1]:  # in an input's or a constant's memory: none of ours
            if t.base is None and (t.ptr, t.nbytes) != (outside[j][0], outside[j][3].nbytes):
                t.base = outside[j][3].base or outside[j][3]
        elif t.base is None and t.ptr not in given and name:
            roots[t.ptr] = [t, t.ptr + max(t.nbytes, 1), 1]
            bisect.insort(starts, t.ptr)
            root_of[name] = t.ptr

    try:
        for k, (node, fn, on_gpu, host_inputs) in enumerate(steps):
            if on_gpu:  # host inputs (shapes, axes…) are read where they are, the rest must be on the GPU
                outs = fn(rt, stream, *[None if not n else values[n] if i in host_inputs or node.subgraphs
                                        else on_gpu_value(n) for i, n in enumerate(node.inputs)])
            else:  # integer shape/mask arithmetic: the CPU kernel, on the host
                host_args = [rt.to_host(values[n], stream) if n in values else None for n in node.inputs]
                outs = [DeviceTensor.on_host(v) for v in fn(*host_args)]
            for name, t in zip(node.outputs, outs):
                if t is not None:
                    scratch.append(t)  # freed after the run even when the node leaves it unnamed
                    if name:
                        values[name] = t
                    if t.ptr:
                        adopt(name, t)
            if dead_after is None:
                continue
            for name in dead_after[k]:
                start = root_of.pop(name, None)
                if start is None:
                    continue
                entry = roots[start]
                entry[2] -= 1
                if entry[2] == 0:
                    del roots[start]
                    del starts[bisect.bisect_left(starts, start)]
                    rt.free(entry[0])
                    freed[start] = len(scratch)
    finally:
        if freed:  # not freed again after the run: by then a later allocation (kept or not) may have the address
            scratch[:] = [t for i, t in enumerate(scratch) if i >= freed.get((t.base or t).ptr, 0)]
    return [values[n] for n in output_names]


class Branch:
    """A subgraph of an If (then_branch, else_branch) or a Loop (body), compiled as the fused node's graph is: its steps,
    its constants on the GPU (held by the node). `inputs`: the names of what the kernel passes it (a Loop body's own
    inputs, then the outer values it reads), in that order (kernels/cuda/control.py)."""

    def __init__(self, kernel: CudaKernel, graph, placed: list, inputs: list):
        self.rt, self.inputs, self.output_names = kernel.rt, list(inputs), list(graph.outputs)
        self.constants = _upload_constants(kernel.rt, graph, placed, inputs, graph.outputs)
        kernel.held += self.constants.values()
        self.kernel = kernel  # its held_addresses: every constant, the branches' too
        self.steps = kernel._build(graph, placed, lambda node: None)
        self.dead_after = last_uses(self.steps, self.output_names)
        rank = lambda k: len(graph.value(graph.inputs[k]).shape or ()) if k < len(graph.inputs) else 0
        self.counter_shape, self.cond_shape = (1,) * rank(0), (1,) * rank(1)  # a Loop body's first two inputs
        self.cond_passes = condition_passes(graph)  # a Loop body's condition, never read back
        self.output_types = [(graph.value(n).shape, graph.value(n).dtype) for n in graph.outputs]

    def _results(self, stream, values, scratch: list) -> list:
        values = dict(self.constants, **dict(zip(self.inputs, values)))
        return run_steps(self.rt, self.steps, values, self.output_names, stream, scratch, self.dead_after,
                         self.kernel.held_addresses)

    def run(self, stream, values) -> list[DeviceTensor]:
        """The subgraph on `values` (an eager run, or an If's condition known on the host): its outputs; what it
        allocated besides them goes back to the cache."""
        scratch = []
        results = self._results(stream, values, scratch)
        _release(self.rt, scratch, list(values) + results, self.kernel.held_addresses)
        return results

    def conditional(self, other: "Branch", stream, cond: DeviceTensor, outer, check) -> list[DeviceTensor]:
        """While `stream` is captured: this branch (then) and `other` (else) as two conditional graph nodes chosen by
        `cond` on the GPU at every launch, each body copying its outputs into the If's (one shape each: branches
        whose outputs differ in shape cannot be captured, and the binding runs eagerly). A branch whose nodes refuse
        the binding's shapes (silero-vad's 8 kHz network given a 16 kHz chunk) fails the run when taken, through
        `check` (the If's GpuCheck), as an eager run taking it does; where both refuse, the capture fails."""
        rt, outputs, refused = self.rt, None, None
        for body, branch, attr in zip(rt.if_bodies(stream, cond), (self, other), ("then_branch", "else_branch")):
            with rt.body_capture(body, stream) as body_stream:
                scratch = []
                try:
                    results = branch._results(body_stream, outer, scratch)
                except (ValueError, TypeError, IndexError) as e:  # what the shapes decide: so would an eager run
                    if refused is not None:
                        raise
                    refused = e
                    rt.launch_rows("seamless_branch_refused", 1, body_stream, gpu_check_arg(
                        check, rt, body_stream, f"its {attr} refuses these shapes: {e}", type(e)), threads=1)
                    _release(rt, scratch, list(outer), self.kernel.held_addresses)
                    continue
                results = [_on_gpu(rt, t, body_stream, scratch) for t in results]
                if outputs is None:
                    outputs = [rt.alloc(t.shape, t.dtype) for t in results]
                _settle(rt, body_stream, outputs, results, self.output_names, "the If's output", scratch)
                _release(rt, scratch, list(outer), self.kernel.held_addresses)  # kept by the graph: launches reuse them
        return outputs

    def loop(self, stream, m, cond, carried: list, outer: list, n_scan: int) -> list[DeviceTensor]:
        """A Loop run from the host (eager): the body an iteration while i < M and its condition (read back each
        time); the final carried values, then each scan output (its iterations' slices stacked)."""
        rt = self.rt
        trips = int(rt.to_host(m, stream).reshape(-1)[0]) if m is not None else np.iinfo(np.int64).max
        go = bool(rt.to_host(cond, stream).reshape(-1)[0]) if cond is not None else True
        kept = addresses(carried + outer) | self.kernel.held_addresses  # not the loop's to free
        slices: list[list] = [[] for _ in range(n_scan)]
        i = 0
        while i < trips and go:
            counter = DeviceTensor.on_host(np.full(self.counter_shape, i, np.int64))
            flag = DeviceTensor.on_host(np.full(self.cond_shape, go, np.bool_))
            out = self.run(stream, [counter, flag] + carried + outer)
            go = go if self.cond_passes else bool(rt.to_host(out[0], stream).reshape(-1)[0])
            previous, carried = carried, out[1:1 + len(carried)]
            for k, t in enumerate(out[1 + len(carried):]):
                if slices[k] and t.shape != slices[k][0].shape:
                    raise ValueError(f"Inconsistent shape in loop output for output. Expected:{list(slices[k][0].shape)}"
                                     f" Got:{list(t.shape)}")
                slices[k].append(t)
            live = addresses(carried + [t for s in slices for t in s])
            _free_once(rt, previous + out[:1], kept | live, kept)  # what no later iteration reads
            i += 1
        uploads = []
        stacked = [self._stack(stream, parts, 1 + len(carried) + k, 0, False, uploads)
                   for k, parts in enumerate(slices)]
        _free_once(rt, [t for parts in slices for t in parts] + uploads, kept | addresses(carried), kept)
        return carried + stacked

    def scan(self, stream, states: list, xs: list, axes: list, directions: list, length: int, outer: list,
             out_axes: list, out_directions: list) -> list[DeviceTensor]:
        """A Scan: the body over positions 0..length-1 of the scan inputs (a direction 1 input read from its end),
        each position's slices copied out on the GPU; the final states, then each scan output's slices stacked
        along its axis (direction 1: last first). Its launches depend on the shapes only: captured in line."""
        rt, n_states, uploads = self.rt, len(states), []
        xs = [_on_gpu(rt, x, stream, uploads) for x in xs]
        kept = addresses(states + xs + outer) | self.kernel.held_addresses
        slices: list[list] = [[] for _ in range(len(self.output_names) - n_states)]
        for t in range(length):
            parts = [_take(rt, stream, x, length - 1 - t if d else t, a) for x, a, d in zip(xs, axes, directions)]
            out = self.run(stream, states + parts + outer)
            previous, states = states, out[:n_states]
            for k, v in enumerate(out[n_states:]):
                if slices[k] and v.shape != slices[k][0].shape:
                    raise ValueError(f"Inconsistent shape in scan output {k}: {list(slices[k][0].shape)} then "
                                     f"{list(v.shape)}")
                slices[k].append(v)
            live = addresses(states + [v for s in slices for v in s])
            _free_once(rt, previous + parts, kept | live, kept)
        stacked = [self._stack(stream, parts, n_states + k,
                               scan_output_axis(k, len(parts[0].shape) + 1, out_axes[k]) if parts else 0,
                               bool(out_directions[k]), uploads) for k, parts in enumerate(slices)]
        _free_once(rt, [v for parts in slices for v in parts] + uploads, kept | addresses(states), kept)
        return states + stacked

    def _stack(self, stream, parts: list, output: int, axis: int, reverse: bool, uploads: list) -> DeviceTensor:
        """A Loop's or a Scan's scan output: its iterations' slices (last first with `reverse`) stacked along a new
        `axis`; after no iteration, [0] and body output `output`'s declared dims, as stock makes it. Host slices are
        uploaded (into `uploads`)."""
        rt = self.rt
        if not parts:
            shape, dtype = self.output_types[output]
            return rt.alloc([0] + [d if isinstance(d, int) else 0 for d in shape or ()], dtype)
        y = rt.alloc(parts[0].shape[:axis] + (len(parts),) + parts[0].shape[axis:], parts[0].dtype)
        strides = contiguous_strides(y.shape)
        for j, v in enumerate(parts[::-1] if reverse else parts):
            v = _on_gpu(rt, v, stream, uploads)
            rt.strided_copy(stream, v, y, v.shape, contiguous_strides(v.shape), strides[:axis] + strides[axis + 1:],
                            dst_offset=j * strides[axis])
        return y

    def while_node(self, stream, m, cond, carried: list, outer: list) -> list[DeviceTensor]:
        """While `stream` is captured: a Loop without scan outputs as one conditional WHILE node. Its carried values
        live in buffers the body reads and overwrites each iteration (each keeps one shape: a value that changes
        shape cannot be captured, and the binding runs eagerly); the body's last kernel advances the counter and
        decides on the GPU whether it runs again."""
        rt, kept = self.rt, []
        m, cond = (_on_gpu(rt, t, stream, kept) if t is not None else None for t in (m, cond))
        counter, flag = rt.alloc(self.counter_shape, np.int64), rt.alloc(self.cond_shape, np.bool_)
        buffers = [rt.alloc(t.shape, t.dtype) for t in carried]
        for b, t in zip(buffers, carried):
            t = _on_gpu(rt, t, stream, kept)
            rt.copy(b.ptr, t.ptr, t.nbytes, stream)
        body, handle = rt.loop_body(stream, m, cond, counter, flag)
        with rt.body_capture(body, stream) as body_stream:
            scratch = []
            results = self._results(body_stream, [counter, flag] + buffers + outer, scratch)
            results = [_on_gpu(rt, t, body_stream, scratch) for t in results]
            go = results[0]
            if any(_overlap(go, b) for b in buffers):  # read after the carried values are overwritten: kept aside
                go = rt.alloc(go.shape, go.dtype)
                scratch.append(go)
                rt.copy(go.ptr, results[0].ptr, go.nbytes, body_stream)
            _settle(rt, body_stream, buffers, results[1:], self.output_names[1:], "a Loop's carried value", scratch)
            rt.loop_next(body_stream, handle, m, go, counter, flag)
            _release(rt, scratch, [counter, flag] + buffers + outer, self.kernel.held_addresses)  # kept by the graph
        _release(rt, kept + [counter, flag], [], self.kernel.held_addresses)
        return buffers


def _take(rt, stream, x: DeviceTensor, index: int, axis: int) -> DeviceTensor:
    """x's slice at `index` along `axis` (that axis dropped), copied on the GPU."""
    shape = x.shape[:axis] + x.shape[axis + 1:]
    y = rt.alloc(shape, x.dtype)
    strides = contiguous_strides(x.shape)
    if y.nbytes:
        rt.strided_copy(stream, x, y, shape, strides[:axis] + strides[axis + 1:], contiguous_strides(shape),
                        src_offset=index * strides[axis])
    return y


def addresses(tensors) -> set:
    """The tensors' addresses and their views' allocations (addresses that freeing must keep)."""
    return {t.ptr for t in tensors} | {t.base.ptr for t in tensors if t.base is not None}


def _free_once(rt, tensors: list, keep: set, freed: set) -> None:
    """Free each tensor's allocation (a view's base) whose address is not in `keep` (nor 0); `freed` gets the
    addresses freed."""
    for t in tensors:
        t = t.base or t
        if t.ptr and t.ptr not in keep and t.ptr not in freed:
            rt.free(t)
            freed.add(t.ptr)


def _overlap(a: DeviceTensor, b: DeviceTensor) -> bool:
    """Whether two GPU values share memory (a view lies inside another's)."""
    return a.ptr < b.ptr + max(b.nbytes, 1) and b.ptr < a.ptr + max(a.nbytes, 1)


def _settle(rt, stream, targets: list, results: list, names: list, what: str, scratch: list) -> None:
    """Copy results into targets of the same shapes on `stream` (a conditional node's body). A result in another
    target's buffer (a Loop swapping carried values), or in part of its own, would be overwritten before it is read:
    then all go through copies first (into `scratch`)."""
    for name, target, t in zip(names, targets, results):
        if (t.shape, t.dtype) != (target.shape, target.dtype):
            raise ValueError(f"{what} {name!r} has two shapes ({target.shape} {target.dtype} and {t.shape} "
                             f"{t.dtype}): a captured graph holds one")
    if any(_overlap(t, other) and (j != i or t.ptr != other.ptr)
           for i, t in enumerate(results) for j, other in enumerate(targets)):
        staged = [rt.alloc(t.shape, t.dtype) for t in results]
        scratch.extend(staged)
        for s, t in zip(staged, results):
            rt.copy(s.ptr, t.ptr, t.nbytes, stream)
        results = staged
    for target, t in zip(targets, results):
        if t.ptr != target.ptr:
            rt.copy(target.ptr, t.ptr, t.nbytes, stream)
