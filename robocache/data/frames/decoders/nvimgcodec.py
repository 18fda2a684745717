"""The GPU decoder: JPEG frames decoded into GPU memory by robocache's own
CUDA kernels, with nvJPEG and nvImageCodec beside them (the optional extra
``robocache[nvimgcodec]``), driven from robocache's extension: one native
call a batch, no Python object per frame, its host work on native threads
without the GIL. Each batch is split three ways:

- the hardware engines' share (NVJPG: no SMs), in one call of nvJPEG's
  batched decode (none by default);
- the host's share: libjpeg-turbo (nvImageCodec's CPU backend, on its own
  threads) into pinned memory, copied to the GPU in one call where the
  frames' places lie end to end (none by default);
- the rest, by default every frame, to robocache's kernels
  (``csrc/cuda/jpeg_kernels.cuh``): libjpeg-turbo's own steps (its accurate
  inverse DCT, fancy upsampling and colour conversion), so Pillow's pixels
  exactly, with the host's work a frame only its header read and a copy of
  its bytes, and three launches a batch. Frames they do not decode
  (progressive, 12-bit, CMYK, no Huffman tables of their own) go to
  nvJPEG's CUDA decoder, whose pixels are up to 3 grey levels off.

Where nvJPEG's batched decode does not load (a GPU without the engines, for
their share), or a frame or batch is refused (cut short, not supported,
corrupt), nvImageCodec decodes the frames, a frame at a time, and names any
that does not decode.

The hardware engines write their output as soon as they are called,
whatever the CUDA stream they are handed has queued: with them the decoder
therefore waits on the host until the memory it writes is free, on its own
thread where it decodes ahead (``FrameQueue``), on the caller's in
``decode``."""

import contextlib
import os
import sys
import warnings

import torch

from ..encoding import pack_images

# The shares of each batch given to the hardware engines and to the host's
# cores, by default: none; robocache's kernels take the rest. Beside a
# training step, the kernels kept the step fastest (docs/benchmarks.md), with
# libjpeg-turbo's pixels; the engines' are those but for a grey level in
# upsampled chroma.
HARDWARE_SHARE = 0.0
HOST_SHARE = 0.0
EXTRA = "pip install robocache[nvimgcodec]"
# A queue's threads, each with its own decoder, taking the steps in turn.
# One by default: two to four did not make a training step fed by the
# sampler faster, with either decoder (docs/benchmarks.md).
QUEUE_WORKERS = 1
# A queue's slots past those it decodes ahead into: the hardware engines
# write as soon as they are called, so a slot is reused only once the
# caller's stream is done with it; these slots let that be a step the
# caller let go of a few steps ago (done on the GPU by then) rather than the
# one it let go of just now (done only when the GPU catches up with it).
SLOTS_BEHIND = 2
_decoders = {}
_warned = set()


def warn_once(said, stacklevel=2):
    """``said`` as a UserWarning, the first time it is said only
    (``stacklevel`` as ``warnings.warn``'s, counted from the caller)."""
    if said not in _warned:
        _warned.add(said)
        warnings.warn(said, stacklevel=stacklevel + 1)


def check_shares(hardware_share, host_share, where):
    """The rule of a GPU decoder's shares: each one given (not None) a number
    in [0, 1], their sum at most 1; a ValueError from ``where`` otherwise."""
    for name, share in (("hardware_share", hardware_share), ("host_share", host_share)):
        if share is not None and (
            isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1
        ):
            raise ValueError(f"{where}: {name} must be in [0, 1]; got {share!r}")
    if (hardware_share or 0) + (host_share or 0) > 1:
        raise ValueError(
            f"{where}: hardware_share + host_share must be at most 1; got "
            f"{hardware_share!r} + {host_share!r}"
        )


def _nvidia_dirs():
    """Each nvidia/ folder on the import path (NVIDIA's wheels install there)."""
    found = (os.path.join(p or os.getcwd(), "nvidia") for p in sys.path)
    return [d for d in found if os.path.isdir(d)]


def library_paths():
    """The paths of libnvimgcodec.so.0 and libnvjpeg.so.13, or None where
    the extra is not installed. nvImageCodec's JPEG extension loads nvJPEG
    from beside it (its run path), so both must be in one nvidia/ folder,
    as pip installs them."""
    for nvidia in _nvidia_dirs():
        library = os.path.join(nvidia, "nvimgcodec", "libnvimgcodec.so.0")
        nvjpeg = os.path.join(nvidia, "cu13", "lib", "libnvjpeg.so.13")
        if os.path.exists(library) and os.path.exists(nvjpeg):
            return library, nvjpeg
    return None


def _has_native_decoder():
    try:
        torch.classes.robocache.FrameDecoder
    except RuntimeError:  # a class torch does not know (a build without CUDA)
        return False
    return True


def unavailable():
    """Why the GPU decoder cannot run here, or None where it can."""
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    if not _has_native_decoder():
        return "this build of robocache has no CUDA kernels"
    if library_paths() is None:
        return f"nvImageCodec and nvJPEG are not installed ({EXTRA})"
    return None


# Cores the host share's threads leave, by default, to the training loop's
# own host threads: the caller's, and autograd's that runs the backward.
CORES_LEFT_TO_TRAINING = 2


def default_threads():
    """The host share's threads by default: the CPUs this process may use,
    less ``CORES_LEFT_TO_TRAINING`` (at least 1)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (usable or 1) - CORES_LEFT_TO_TRAINING)


class GpuDecoder:
    """JPEG frames decoded on ``device`` (see the module). ``hardware_share``:
    the share of each batch given to the hardware engines (None:
    ``HARDWARE_SHARE``); ``host_share``: the share decoded on the host's
    cores (None: ``HOST_SHARE``); the rest goes to robocache's kernels
    (``kernels``; else to nvJPEG's CUDA decoder);
    ``threads``: the decoder's host threads (None: ``default_threads()``,
    the usable cores but two); ``options``: nvImageCodec's decoder options (its defaults: "");
    ``batched``: each of the GPU's shares in one call of nvJPEG's batched
    decode (where it loads, else with a warning through nvImageCodec; its
    misses and failures go through nvImageCodec, which names a frame that
    does not decode)."""

    backend = "nvimgcodec"

    def __init__(
        self,
        device,
        hardware_share=HARDWARE_SHARE,
        threads=None,
        options="",
        batched=True,
        host_share=None,
        kernels=True,
    ):
        check_shares(hardware_share, host_share, "GpuDecoder")
        self.hardware_share = float(HARDWARE_SHARE if hardware_share is None else hardware_share)
        if host_share is None:
            host_share = min(HOST_SHARE, 1.0 - self.hardware_share)
        self.host_share = float(host_share)
        why = unavailable()
        if why is not None:
            raise RuntimeError(f"robocache: the nvimgcodec frame decoder cannot run: {why}")
        self.device = torch.device(device)
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        self.device = torch.device("cuda", index)
        threads = default_threads() if threads is None else threads
        key = (index, self.hardware_share, self.host_share, threads, options, bool(batched),
               bool(kernels))  # fmt: skip
        if key not in _decoders:  # one a device and setting: its engines and threads are kept
            library, nvjpeg = library_paths()
            _decoders[key] = torch.classes.robocache.FrameDecoder(
                library, nvjpeg if batched else "", index, self.hardware_share, self.host_share,
                threads, options, bool(kernels),
            )  # fmt: skip
        self.native = _decoders[key]
        why = self.native.batched_error()
        if why:
            warn_once(f"robocache: nvJPEG's batched decode did not load ({why}); that share "
                      "of each batch goes through nvImageCodec")  # fmt: skip

    @property
    def kernels(self):
        """Whether robocache's kernels take the share the engines and the host do not."""
        return self.native.uses_kernels()

    @property
    def batched(self):
        """Whether each share of a batch goes through nvJPEG's batched decode."""
        return self.native.uses_batched()

    def decode_rows(self, values, byte_offsets, rows, out, name=None, codec="jpeg"):
        """Frames ``rows`` of a stream's bytes (``values`` and ``byte_offsets``
        in host memory) decoded into ``out`` (len(rows), H, W, C) on the
        device, ordered on its current CUDA stream. A frame that does not
        decode raises a ValueError naming it (``name(i)``)."""
        index, why = self.native.decode(values, byte_offsets, rows, out)
        if index >= 0:
            where = name(index) if name else f"frame {index}"
            raise ValueError(f"{where}: the {codec} frame does not decode: {why}")
        return out

    def decode(self, images, encoding, out=None, name=None, cuda_stream=None):
        """Each of ``images`` (bytes-like) decoded into ``out`` (default: a new
        (n, *shape) uint8 tensor on the device), ordered on ``cuda_stream``
        (default: the current one; an ``out`` given must be free there)."""
        values, byte_offsets = pack_images(images)
        rows = torch.arange(len(images))
        with (
            torch.cuda.stream(cuda_stream) if cuda_stream is not None else contextlib.nullcontext()
        ):
            if out is None:  # on the stream it is decoded on
                shape = (len(images), *encoding.shape)
                out = torch.empty(shape, dtype=torch.uint8, device=self.device)
            return self.decode_rows(values, byte_offsets, rows, out.view(-1, *out.shape[-3:]),
                                    name, encoding.codec).view(out.shape)  # fmt: skip

    def queue(self, values, byte_offsets, rows, tables, positions, ahead, workers=QUEUE_WORKERS,
              files=None):  # fmt: skip
        """A native FrameQueue decoding up to ``ahead`` steps past the last
        one released, on ``workers`` threads, into the tables' ring of
        slots (at least ``ahead + SLOTS_BEHIND``; see
        csrc/decoders/frame_queue.h). ``files``: per key, (-1, 0), or (a
        file descriptor, the byte where the key's values begin in it) to
        read its bytes from with positional reads."""
        workers = max(1, min(workers, ahead))
        files = files or [(-1, 0)] * len(values)
        return torch.classes.robocache.FrameQueue(
            self.native, values, byte_offsets, [f for f, _ in files], [b for _, b in files], rows,
            tables, positions, ahead, workers,
        )  # fmt: skip
