"""Frames kept as JPEG: how much smaller, and how fast each decoder gets them back.

    python -m benchmark.frames [--sizes 96x96,224x224,480x640] [--batch 256] [--json PATH] [--small]

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
  nvimgcodec        nvImageCodec's batched decode (hardware engines where
                    the GPU has them, else CUDA).

Reported: frames/s (median of --repeats), and each decoder's largest and
mean difference in grey levels from Pillow's decode of the same bytes. A GPU
decoder's time includes its output on the GPU (synchronized).
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
        "robocache-host": lambda blobs, shape: host_codec.decode(
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
    return found


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
    if args.json:
        meta = {"torch": torch.__version__, "quality": args.quality, "batch": args.batch}
        if torch.cuda.is_available():
            meta["device"] = torch.cuda.get_device_name()
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
