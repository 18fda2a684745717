"""Frames kept as JPEG: how much smaller, and how fast each decoder gets them back.

    python -m benchmark.frames [--sizes 96x96,224x224,480x640] [--batch 256] [--json PATH] [--small]
        [--beside-training [--seconds 6] [--rate FRAMES_PER_S]]

For each size, a batch of camera-like frames (tests/fixtures/images.py:
shading, a moving square, sensor noise) is encoded as JPEG at --quality
with robocache's ingest encoder, and the batch is decoded by each decoder
that is installed here:

  robocache-host    robocache's host decode, as the sampler calls it (simplejpeg
                    where installed, else Pillow) on a thread pool of --threads;
  pil               Pillow (libjpeg-turbo, accurate IDCT) on the same pool;
  simplejpeg        libjpeg-turbo through simplejpeg, on the same pool
                    (accurate IDCT; "simplejpeg-fastdct": the fast one);
  torchvision-cpu   torchvision.io.decode_jpeg on the list (libjpeg-turbo);
  torchvision-cuda  the same with device="cuda" (nvJPEG);
  nvimgcodec        nvImageCodec's batched decode through its Python API
                    (hardware engines where the GPU has them, else CUDA);
  robocache-kernels robocache's own CUDA JPEG kernels alone
                    (torch.classes.robocache.JpegDecoder: no extra), one
                    call a batch from the bytes in host memory;
  robocache-gpu-hwX[-hostY]
                    robocache's GPU decoder (its kernels, nvJPEG and
                    nvImageCodec driven from the extension, one native call
                    a batch from the bytes in host memory, as the sampler
                    calls it), X the share of each batch given to the
                    hardware engines, Y the share decoded on the host's
                    cores (libjpeg-turbo, into pinned memory, one copy to
                    the GPU), the rest to robocache's kernels ("-nvjpeg":
                    to nvJPEG's CUDA decoder instead), the engines' and
                    nvJPEG's shares each in one call of nvJPEG's batched
                    decode ("-unbatched": through nvImageCodec, a frame at
                    a time).

Reported: frames/s (median of --repeats), and each decoder's largest and
mean difference in grey levels from Pillow's decode of the same bytes. A GPU
decoder's time includes its output on the GPU (synchronized).

``--beside-training`` (a CUDA device): each decoder again, on a thread of
its own with a CUDA stream of its own, while the main thread trains a
ResNet-18 (torchvision) on 2 x 128 frames of the largest size a step, as a
policy's step would run beside the sampler: the decoder's frames/s then,
and the training step's time against the step alone. The sampler's queue
(robocache-gpu-queue-hwX[-hostY]) decodes as fast as it can; with ``--rate`` it is
also taken at that many frames a second, as a step demanding them would.
"""

import argparse
import io
import json
import statistics
import sys
import time

import numpy as np
import torch

from benchmark.writers import writers
from robocache.data.frames import FrameEncoding
from robocache.data.frames import codec as host_codec
from robocache.data.frames.decoders import host as host_decoder
from robocache.data.frames.decoders import nvimgcodec as gpu_decoder
from robocache.data.frames.encoding import pack_images

# (hardware engines, host, robocache's kernels) shares of each batch the GPU
# decoder is measured at; the rest goes to robocache's kernels, or where
# they are not asked for, to nvJPEG's CUDA decoder.
SHARES = (
    (0.0, 0.0, True),
    (0.0, 0.0, False),
    (0.5, 0.0, True),
    (1.0, 0.0, True),
    (0.0, 0.5, True),
    (0.0, 1.0, True),
)


def _share_name(hardware, host, kernels=True):
    return f"hw{hardware:g}" + (f"-host{host:g}" if host else "") + ("" if kernels else "-nvjpeg")


def _packed_calls(decode_rows):
    """decode(blobs, shape) for a decoder called as the sampler calls it:
    the batch's bytes packed once into pinned memory (as a store holds
    them), then ``decode_rows(values, byte_offsets, rows, out)``, one call a
    batch, into a new (n, *shape) uint8 tensor on the GPU."""
    packed = {}

    def run(blobs, shape):
        if id(blobs) not in packed:
            values, sizes = pack_images(blobs)
            packed.clear()
            packed[id(blobs)] = (values.pin_memory(), sizes, torch.arange(len(blobs)))
        values, sizes, rows = packed[id(blobs)]
        out = torch.empty((len(blobs), *shape), dtype=torch.uint8, device="cuda")
        decode_rows(values, sizes, rows, out)
        return out

    return run


def _kernels():
    """robocache's CUDA JPEG kernels alone, one call a batch."""
    decoder = torch.classes.robocache.JpegDecoder()

    def decode_rows(values, sizes, rows, out):
        index, why = decoder.decode(values, sizes, rows, out)
        if index >= 0:
            raise RuntimeError(f"frame {index} did not decode: {why}")

    return _packed_calls(decode_rows)


def _pool_decode(decode_one, blobs, threads):
    pool = host_codec.thread_pool(threads)
    return np.stack(list(pool.map(decode_one, blobs)))


def decoders(threads):
    """name -> decode(blobs, shape) -> (n, H, W, 3) uint8 array or tensor, for those installed."""
    from PIL import Image

    def pil_one(blob):
        with Image.open(io.BytesIO(blob)) as image:
            return np.asarray(image.convert("RGB"))

    found = {
        "pil": lambda blobs, shape: _pool_decode(pil_one, blobs, threads),
        "robocache-host": lambda blobs, shape: host_decoder.decode(
            blobs, FrameEncoding("jpeg", shape, torch.uint8), threads
        ),
    }
    try:
        import simplejpeg

        for name, fast in (("simplejpeg", False), ("simplejpeg-fastdct", True)):
            found[name] = lambda blobs, shape, fast=fast: _pool_decode(
                lambda b: simplejpeg.decode_jpeg(b, fastdct=fast), blobs, threads
            )
    except ImportError:
        pass
    try:
        from torchvision.io import decode_jpeg

        def tv(device):
            def run(blobs, shape):
                data = [torch.frombuffer(b, dtype=torch.uint8) for b in blobs]
                frames = decode_jpeg(data, device=device)
                return torch.stack(frames).permute(0, 2, 3, 1)

            return run

        found["torchvision-cpu"] = tv("cpu")
        if torch.cuda.is_available():
            found["torchvision-cuda"] = tv("cuda")
    except ImportError:
        pass
    try:
        from nvidia import nvimgcodec

        decoder = nvimgcodec.Decoder()

        def nvimg(blobs, shape):
            images = decoder.decode([bytes(b) for b in blobs])
            return torch.stack([torch.as_tensor(i, device="cuda") for i in images])

        if torch.cuda.is_available():
            found["nvimgcodec"] = nvimg
    except ImportError:
        pass
    if torch.cuda.is_available() and gpu_decoder._has_native_decoder():
        found["robocache-kernels"] = _kernels()
    if gpu_decoder.unavailable() is None:
        for hardware, host, kernels in SHARES:
            name = f"robocache-gpu-{_share_name(hardware, host, kernels)}"
            found[name] = _robocache_gpu(hardware, host, kernels=kernels)
        found["robocache-gpu-hw0-nvjpeg-unbatched"] = _robocache_gpu(0.0, 0.0, False, False)
    return found


def _robocache_gpu(share, host_share, batched=True, kernels=True):
    """robocache's GPU decoder as the sampler calls it (``batched=False``:
    each share through nvImageCodec, not nvJPEG's batched decode)."""
    decoder = gpu_decoder.GpuDecoder(
        "cuda", share, batched=batched, host_share=host_share, kernels=kernels
    )
    return _packed_calls(decoder.decode_rows)


def measure(decode, blobs, shape, repeats):
    out = decode(blobs, shape)  # warm-up (and the output compared)
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        frames = decode(blobs, shape)
        if torch.is_tensor(frames) and frames.is_cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return len(blobs) / statistics.median(times), torch.as_tensor(np.asarray(out.cpu())
                                                                  if torch.is_tensor(out)
                                                                  else out)  # fmt: skip


def beside_training(found, blobs, shape, seconds, say, rate=None):
    """name -> (the decoder's frames/s on a thread of its own while a
    ResNet-18 trains on the main thread, the step alone / the step beside it)."""
    import threading

    import torchvision

    model = torchvision.models.resnet18(num_classes=10).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    images = torch.randn(256, 3, shape[0], shape[1], device="cuda")
    labels = torch.randint(0, 10, (256,), device="cuda")

    def train(steps):
        for _ in range(steps):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        torch.cuda.synchronize()  # as a loop that logs its loss every few steps

    train(5)
    start = time.perf_counter()
    train(20)
    alone = (time.perf_counter() - start) / 20
    say(f"ResNet-18 step alone: {alone * 1e3:.1f} ms")
    results = {}
    runs = {name: _calls(decode, blobs, shape) for name, decode in found.items()}
    if gpu_decoder.unavailable() is None:
        for hardware, host, kernels in SHARES:
            name = f"robocache-gpu-queue-{_share_name(hardware, host, kernels)}"
            runs[name] = _queue(hardware, host, blobs, shape, kernels=kernels)
            if rate is not None:
                runs[f"{name}-at-{rate:g}"] = _queue(
                    hardware, host, blobs, shape, rate=rate, kernels=kernels
                )
    for name, batches in runs.items():
        stop, count = threading.Event(), [0]

        def work(batches=batches):
            for frames in batches():
                count[0] += frames
                if stop.is_set():
                    return

        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        train(5)
        first, start, steps = count[0], time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            train(5)
            steps += 5
        elapsed = time.perf_counter() - start
        decoded = count[0] - first
        stop.set()
        thread.join()
        results[name] = (decoded / elapsed, alone / (elapsed / steps))
        say(f"beside training: {name:<20} {decoded / elapsed:10.0f} frames/s, step efficiency "
            f"{results[name][1]:.3f}")  # fmt: skip
    return results


def _calls(decode, blobs, shape):
    """Batches of one decoder call each, on a CUDA stream of the thread's own."""
    decode(blobs, shape)  # warm

    def batches():
        cuda_stream = torch.cuda.Stream()
        with torch.cuda.stream(cuda_stream):
            while True:
                out = decode(blobs, shape)
                if torch.is_tensor(out) and out.is_cuda:
                    cuda_stream.synchronize()
                yield len(blobs)

    return batches


def _queue(share, host_share, blobs, shape, steps=100_000, ahead=3, rate=None, kernels=True):
    """Batches as the sampler's iteration gets them: a native queue decodes
    each step's frames ahead on threads of its own; the thread takes each
    step's table and releases it (two calls a batch) on a CUDA stream of its
    own, as the sampler's side stream does; with ``rate``, at most that many
    frames a second (a step's demand)."""
    decoder = gpu_decoder.GpuDecoder("cuda", share, host_share=host_share, kernels=kernels)
    values, sizes = pack_images(blobs)
    n = len(blobs)
    rows = torch.arange(1, n + 1).repeat(steps, 1)

    def batches():
        slots = ahead + gpu_decoder.SLOTS_BEHIND
        tables = torch.zeros((slots, n + 1, *shape), dtype=torch.uint8, device="cuda")
        positions = torch.empty((slots, n), dtype=torch.int64, device="cuda")
        cuda_stream = torch.cuda.Stream()
        cuda_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(cuda_stream):
            queue = decoder.queue(
                [values.pin_memory()], [sizes], [rows], [tables], [positions], ahead
            )
            began = time.perf_counter()
            try:
                for step in range(steps):
                    if rate is not None:
                        time.sleep(max(0.0, began + step * n / rate - time.perf_counter()))
                    if queue.take(step) < 0:
                        raise RuntimeError(f"step {step} did not decode: {queue.failure()}")
                    queue.release(step)
                    yield n
            finally:
                queue.close()

    return batches


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmark.frames",
        description="JPEG frames: the size against raw, and each decoder's frames/s.",
    )
    parser.add_argument("--sizes", default="96x96,224x224,480x640", help="HxW,HxW,...")
    parser.add_argument("--batch", type=int, default=256, help="frames decoded a call")
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality")
    parser.add_argument("--threads", type=int, default=None, help="host decode threads")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--small", action="store_true", help="a small run (a smoke test)")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument(
        "--beside-training", action="store_true",
        help="each decoder again while a ResNet-18 trains (a CUDA device)",
    )  # fmt: skip
    parser.add_argument("--seconds", type=float, default=6.0, help="each decoder's time beside")
    parser.add_argument("--rate", type=float, help="beside: the queue taken at this frames/s too")
    args = parser.parse_args(argv)
    if args.small:
        args.sizes, args.batch, args.repeats = "24x32", 8, 1
    sizes = [tuple(int(n) for n in s.split("x")) for s in args.sizes.split(",")]
    camera_frames = writers("images").camera_frames
    found = decoders(args.threads)
    print(f"decoders here: {', '.join(found)}; torch {torch.__version__}", file=sys.stderr)
    rows = []
    for height, width in sizes:
        frames = camera_frames(args.batch, height, width, seed=height)
        blobs = host_codec.encode(frames, "jpeg", args.quality, args.threads)
        raw = frames.numel()
        encoded = sum(len(b) for b in blobs)
        reference = None
        for name, decode in found.items():
            rate, out = measure(decode, blobs, (height, width, 3), args.repeats)
            if reference is None:
                reference = out.int()
            diff = (out.int() - reference).abs()
            rows.append(
                {
                    "size": f"{height}x{width}",
                    "decoder": name,
                    "frames_per_s": rate,
                    "raw_over_jpeg": raw / encoded,
                    "max_levels_from_pil": int(diff.max()),
                    "mean_levels_from_pil": float(diff.double().mean()),
                }
            )
            r = rows[-1]
            print(
                f"{r['size']:>8} {name:<20} {rate:10.0f} frames/s  raw/jpeg {r['raw_over_jpeg']:5.1f}"
                f"  from PIL: max {r['max_levels_from_pil']:3d}, mean "
                f"{r['mean_levels_from_pil']:.2f} levels",
                flush=True,
            )
    beside = {}
    if args.beside_training and torch.cuda.is_available():
        height, width = sizes[-1]
        blobs = host_codec.encode(camera_frames(args.batch, height, width, seed=height), "jpeg",
                                  args.quality, args.threads)  # fmt: skip
        say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
        for name, (rate, efficiency) in beside_training(
            found, blobs, (height, width, 3), args.seconds, say, args.rate
        ).items():
            beside[name] = {"size": f"{height}x{width}", "frames_per_s": rate,
                            "step_efficiency": efficiency}  # fmt: skip
            print(f"{height}x{width} beside training {name:<20} {rate:10.0f} frames/s"
                  f"  step efficiency {efficiency:.3f}", flush=True)  # fmt: skip
    if args.json:
        meta = {"torch": torch.__version__, "quality": args.quality, "batch": args.batch}
        if torch.cuda.is_available():
            meta["device"] = torch.cuda.get_device_name()
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows, "beside_training": beside}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
