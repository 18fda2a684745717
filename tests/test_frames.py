"""Encoded frame streams on the CPU: ingest (frames=, jpeg_quality=, resize=,
verify=), save, load and shard, and the sampler's decode of each batch (each
distinct frame once, errors naming key, episode and frame).

JPEG is lossy: windows of a JPEG store are compared with the PIL decode of
its own bytes exactly, and with the raw frames (camera-like, with sensor
noise, quality 90, 4:2:0 chroma) by their peak signal-to-noise ratio."""

import pytest

pytest.importorskip("PIL", reason="the frames extra: pip install robocache[frames]")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from fixtures.images import camera_frames, jpeg, png  # noqa: E402
from frame_checks import assert_near, pil_frames, stored_frames  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from robocache.data import EpisodeStore, LoaderError, WindowSampler  # noqa: E402
from robocache.data.frames import EncodedFrames, resize  # noqa: E402
from robocache.data.frames import codec as host_codec  # noqa: E402
from robocache.data.frames.decoders import host as host_decoder  # noqa: E402

MS = 10**6


DELTAS = {"cam": [-0.2, 0.0, 0.1], "a": [0.0, 0.1]}


def episodes(lengths=(10, 7, 1, 0, 5), size=(48, 64), seed=0):
    out = []
    for e, n in enumerate(lengths):
        t = torch.arange(n) * 100 * MS
        out.append(
            {
                "cam": (camera_frames(n, *size, seed=seed + e), t),
                "a": (torch.randn(n, 2, generator=torch.Generator().manual_seed(e)), t),
            }
        )
    return out


def all_batches(store, **kw):
    sampler = WindowSampler(store, DELTAS, batch_size=5, shuffle=False, **kw)
    return list(sampler)


def test_jpeg_windows_are_the_decoded_frames_and_near_the_raw():
    raw = EpisodeStore.from_episodes(episodes(), progress=False)
    enc = EpisodeStore.from_episodes(episodes(), frames="jpeg", progress=False)
    stream = enc["cam"]
    assert stream.encoding.codec == "jpeg" and stream.values.dtype == torch.uint8
    assert stream.sample_shape == (48, 64, 3) and stream.num_samples == 23
    assert enc["a"].encoding is None  # only image streams are encoded
    decoded = stored_frames(stream)
    assert_near(decoded, raw["cam"].values)
    for r, e in zip(all_batches(raw), all_batches(enc)):
        for name in ("cam_is_pad", "a", "a_is_pad", "episode_index", "frame_index"):
            assert torch.equal(r[name], e[name]), name
        assert e["cam"].dtype == torch.uint8 and e["cam"].shape == r["cam"].shape
        assert_near(e["cam"], r["cam"])
    # Exactly the stored frames: the raw store's windows, with the frames swapped.
    swapped = EpisodeStore.from_episodes(
        [
            {"cam": (decoded[a:b], raw["cam"].times[a:b]), "a": (raw["a"].values[a:b],
                                                                 raw["a"].times[a:b])}
            for a, b in zip(raw["cam"].offsets[:-1].tolist(), raw["cam"].offsets[1:].tolist())
        ],
        progress=False,
    )  # fmt: skip
    for s, e in zip(all_batches(swapped), all_batches(enc)):
        assert torch.equal(s["cam"], e["cam"])


def test_png_frames_are_exact_and_depth_keeps_uint16():
    depth = torch.randint(0, 65535, (6, 8, 10, 1), dtype=torch.int32).to(torch.uint16)
    t = torch.arange(6) * 100 * MS
    eps = [{"cam": (camera_frames(6, 8, 10), t), "depth": (depth, t)}]
    raw = EpisodeStore.from_episodes(eps, progress=False)
    for form in ("png", "jpeg"):  # jpeg keeps depth as PNG, which holds uint16
        enc = EpisodeStore.from_episodes(eps, frames=form, progress=False)
        assert enc["depth"].encoding.codec == "png" and enc["depth"].sample_dtype == torch.uint16
        deltas = {"depth": [-0.1, 0.0], "cam": [0.0]}
        a = WindowSampler(raw, deltas, batch_size=6, shuffle=False).batch_at(range(6))
        b = WindowSampler(enc, deltas, batch_size=6, shuffle=False).batch_at(range(6))
        assert b["depth"].dtype == torch.uint16
        assert torch.equal(a["depth"].view(torch.int16), b["depth"].view(torch.int16))
        if form == "png":
            assert torch.equal(a["cam"], b["cam"])


def test_save_load_and_shard_keep_the_bytes(tmp_path):
    enc = EpisodeStore.from_episodes(episodes(), frames="jpeg", progress=False)
    enc.save(tmp_path)
    for mmap in (True, False):
        loaded = EpisodeStore.load(tmp_path, mmap=mmap)
        assert torch.equal(loaded["cam"].values, enc["cam"].values)
        assert torch.equal(loaded["cam"].byte_offsets, enc["cam"].byte_offsets)
        assert loaded["cam"].encoding == enc["cam"].encoding
        assert "jpeg (" in repr(loaded) and "x smaller than raw" in repr(loaded)
        for x, y in zip(all_batches(loaded), all_batches(enc)):
            assert all(torch.equal(x[k], y[k]) for k in x)
    whole = all_batches(enc)[0]
    for rank in range(2):
        shard = EpisodeStore.load(tmp_path, shard=(rank, 2))
        part = enc.take_shard(rank, 2)
        assert torch.equal(shard["cam"].values, part["cam"].values)
        assert int(shard["cam"].byte_offsets[0]) == 0
        assert stored_frames(shard["cam"]).shape[0] == shard["cam"].num_samples
        batch = WindowSampler(shard, DELTAS, batch_size=3, shuffle=False).batch_at([0, 1, 2])
        if rank == 0:  # the first episode's windows, as the whole store cuts them
            assert torch.equal(batch["cam"], whole["cam"][:3])


def test_statistics_of_frames_encoded_at_ingest_are_of_their_decoded_pixels():
    eps = episodes(lengths=(6, 4))
    raw = EpisodeStore.from_episodes(eps, progress=False)["cam"]
    enc = EpisodeStore.from_episodes(eps, frames="jpeg", progress=False)["cam"]
    decoded = stored_frames(enc).double()  # what the sampler returns
    for name, expected in [
        ("mean", decoded.mean(0)),
        ("min", decoded.amin(0)),
        ("max", decoded.amax(0)),
    ]:
        torch.testing.assert_close(enc.stats[name].double(), expected, rtol=0, atol=1e-4)
    assert not torch.equal(enc.stats["max"], raw.stats["max"])  # JPEG moved the pixels
    png = EpisodeStore.from_episodes(eps, frames="png", progress=False)["cam"]
    assert torch.equal(png.stats["mean"], raw.stats["mean"])  # PNG keeps them


def test_jpeg_that_arrives_as_jpeg_is_kept_byte_for_byte():
    frames = camera_frames(5, 32, 40)
    blobs = [jpeg(f.numpy(), subsampling=2, quality=80) for f in frames]
    t = torch.arange(5) * 100 * MS
    enc = EpisodeStore.from_episodes(
        [{"cam": (EncodedFrames(blobs, "jpeg"), t)}], frames="jpeg", progress=False
    )
    assert bytes(enc["cam"].values.numpy()) == b"".join(blobs)
    assert enc["cam"].sample_shape == (32, 40, 3) and "mean" in enc["cam"].stats
    raw = EpisodeStore.from_episodes(
        [{"cam": (EncodedFrames(blobs, "jpeg"), t)}], frames="raw", progress=False
    )
    assert raw["cam"].encoding is None
    assert torch.equal(raw["cam"].values, pil_frames(blobs))
    unverified = EpisodeStore.from_episodes(
        [{"cam": (EncodedFrames(blobs, "jpeg"), t)}], frames="jpeg", verify=False, progress=False
    )
    assert unverified["cam"].stats == {}  # no frame was decoded
    # PNG that arrives as PNG, asked for as JPEG: decoded and encoded once.
    pngs = [png(f.numpy()) for f in frames]
    again = EpisodeStore.from_episodes(
        [{"cam": (EncodedFrames(pngs, "png"), t)}], frames="jpeg", progress=False
    )
    assert again["cam"].encoding.codec == "jpeg"
    assert_near(stored_frames(again["cam"]), frames)


def test_resize_is_antialiased_bilinear_within_one_grey_level():
    frames = torch.randint(0, 256, (3, 37, 53, 3), dtype=torch.uint8)
    for size in ((16, 24), (37, 53), (50, 70)):
        got = resize(frames, size)
        reference = F.interpolate(
            frames.permute(0, 3, 1, 2).double(), size=size, mode="bilinear", antialias=True
        ).permute(0, 2, 3, 1)
        assert got.dtype == torch.uint8 and got.shape == (3, *size, 3)
        assert (got.double() - reference).abs().max() <= 1.0
    t = torch.arange(3) * 100 * MS
    eps = [{"cam": (frames, t), "a": (torch.zeros(3, 2), t)}]
    for form in ("raw", "jpeg"):
        store = EpisodeStore.from_episodes(eps, frames=form, resize=(16, 24), progress=False)
        assert store["cam"].sample_shape == (16, 24, 3)
        assert store["a"].sample_shape == (2,)  # not a frame: left alone


def test_each_distinct_frame_is_decoded_once_a_batch(monkeypatch):
    n = 10
    t = torch.arange(n) * 100 * MS
    enc = EpisodeStore.from_episodes(
        [{"cam": (camera_frames(n, 8, 8), t)}], frames="jpeg", progress=False
    )
    counts = []
    decode = host_decoder.HostDecoder.decode

    def counting(self, images, *args, **kw):
        counts.append(len(images))
        return decode(self, images, *args, **kw)

    monkeypatch.setattr(host_decoder.HostDecoder, "decode", counting)
    sampler = WindowSampler(enc, {"cam": [-0.1, 0.0, 0.1]}, batch_size=4, shuffle=False)
    sampler.batch_at([2, 3])  # rows 1..4: four frames for six window positions
    sampler.batch_at([0, 0, 1])  # padding repeats row 0: rows 0, 1, 2
    assert counts == [4, 3]
    counts.clear()
    assert len(list(sampler)) == 3  # read ahead: rows 0..4, 3..8, 7..9
    assert counts == [5, 6, 3]


def test_a_corrupt_frame_names_key_episode_and_frame():
    eps = episodes(lengths=(4, 6))
    enc = EpisodeStore.from_episodes(eps, frames="jpeg", progress=False)
    stream = enc["cam"]
    row = 4 + 2  # episode 1, frame 2
    begin = int(stream.byte_offsets[row])
    stream.values[begin : begin + 4] = 0  # no JPEG marker: not an image
    sampler = WindowSampler(enc, {"cam": [0.0]}, batch_size=4, shuffle=False)
    sampler.batch_at([0, 1])  # other frames decode
    with pytest.raises(ValueError, match=r"key 'cam', episode 1, frame 2 \(row 6\).*jpeg"):
        sampler.batch_at([5, 6])
    with pytest.raises(ValueError, match=r"key 'cam', episode 1, frame 2"):
        list(sampler)  # the read-ahead's error, in the caller's thread
    blobs = [jpeg(f.numpy()) for f in camera_frames(3, 8, 8)]
    blobs[1] = blobs[1][: len(blobs[1]) // 2]  # truncated
    t = torch.arange(3) * 100 * MS
    with pytest.raises(ValueError, match=r"episode 0, stream 'cam', frame 1: .*jpeg"):
        EpisodeStore.from_episodes(
            [{"cam": (EncodedFrames(blobs, "jpeg"), t)}], frames="jpeg", progress=False
        )


def test_a_corrupt_byte_table_is_caught_at_load(tmp_path):
    EpisodeStore.from_episodes(episodes(), frames="jpeg", progress=False).save(tmp_path)
    path = tmp_path / "store.safetensors"
    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
    tensors = load_file(path)
    name = next(n for n in tensors if n.endswith("/byte_offsets"))
    tensors[name] = tensors[name].clone()
    tensors[name][-1] += 1  # past the bytes
    save_file(tensors, path, metadata=meta)
    for verify in (True, False):  # the structure is checked first, always
        with pytest.raises(LoaderError, match=r"'cam': byte_offsets must rise .* from 0 to the"):
            EpisodeStore.load(tmp_path, verify=verify)
    tensors[name][-1] -= 1
    values = next(n for n in tensors if n.startswith(name[: -len("byte_offsets")]) and
                  n.endswith("/values"))  # fmt: skip
    tensors[values][100] ^= 1  # a frame's byte
    save_file(tensors, path, metadata=meta)
    loaded = EpisodeStore.load(tmp_path)  # a frame's bytes are checked when first read
    with pytest.raises(LoaderError, match=r"values, episode 0 .* does not match its checksum"):
        loaded.place("cpu")


def test_frame_option_errors():
    eps = episodes(lengths=(3,))
    for bad, match in [
        (dict(frames="webp"), "frames must be one of"),
        (dict(frames={"a": "jpeg"}), r"stream 'a': frames='jpeg', but its samples are \(2,\)"),
        (dict(jpeg_quality=0), "jpeg_quality must be an int in"),
        (dict(resize=(0, 4)), r"resize must be \(height, width\)"),
        (dict(verify="yes"), "verify must be True or False"),
    ]:
        with pytest.raises(ValueError, match=match):
            EpisodeStore.from_episodes(eps, progress=False, **bad)
    enc = EpisodeStore.from_episodes(eps, frames="jpeg", progress=False)
    with pytest.raises(ValueError, match="needs floating values; the stream holds jpeg frames"):
        WindowSampler(enc, {"cam": [0.0]}, modes={"cam": "linear"})
    with pytest.raises(ValueError, match="cuda_graph=True: 'cam' holds encoded frames"):
        WindowSampler(enc, {"cam": [0.0]}, cuda_graph=True)
    with pytest.raises(ValueError, match=r"frames .* differ from the earlier episodes'"):
        t = torch.arange(2) * 100 * MS
        frames = camera_frames(2, 8, 8)
        EpisodeStore.from_episodes(
            [{"cam": (EncodedFrames([png(f.numpy()) for f in frames], "png"), t)},
             {"cam": (frames[:, :6], t)}],
            frames={"cam": "png"}, progress=False,
        )  # fmt: skip


def test_images_float_and_normalisation_apply_to_decoded_frames():
    enc = EpisodeStore.from_episodes(episodes(lengths=(6,)), frames="png", progress=False)
    raw = EpisodeStore.from_episodes(episodes(lengths=(6,)), progress=False)
    kw = dict(images="float_chw", normalize={"cam": "mean_std"}, batch_size=6, shuffle=False)
    a = WindowSampler(raw, {"cam": [0.0]}, **kw).batch_at(range(6))
    b = WindowSampler(enc, {"cam": [0.0]}, **kw).batch_at(range(6))
    assert b["cam"].shape == (6, 1, 3, 48, 64) and torch.equal(a["cam"], b["cam"])


def test_host_decoders_agree_and_the_fast_idct_is_an_option(monkeypatch):
    pytest.importorskip("simplejpeg", reason="the frames extra: pip install robocache[frames]")
    from robocache.data.frames import FrameDecoding, FrameEncoding

    frames = camera_frames(4, 40, 56)
    blobs = host_codec.encode(frames, "jpeg", 90)
    encoding = FrameEncoding("jpeg", (40, 56, 3), torch.uint8)
    accurate = host_decoder.decode(blobs, encoding)  # simplejpeg
    fast = host_decoder.decode(blobs, encoding, idct="fast")
    assert torch.equal(accurate, pil_frames(blobs))  # Pillow's pixels
    assert 0 < (fast.int() - accurate.int()).abs().max() <= 8
    t = torch.arange(4) * 100 * MS
    enc = EpisodeStore.from_episodes([{"cam": (frames, t)}], frames="jpeg", progress=False)
    sampler = WindowSampler(enc, {"cam": [0.0]}, decoding=FrameDecoding(idct="fast", threads=2))
    assert torch.equal(sampler.batch_at(range(4))["cam"][:, 0], fast)
    monkeypatch.setattr(host_decoder, "_simplejpeg", lambda: None)  # Pillow alone
    assert torch.equal(host_decoder.decode(blobs, encoding), accurate)
    with pytest.raises(ImportError, match="idct='fast' decodes JPEG with simplejpeg"):
        host_decoder.decode(blobs, encoding, idct="fast")
    with pytest.raises(ValueError, match="idct must be 'accurate' or 'fast'"):
        FrameDecoding(idct="slow")
    with pytest.raises(TypeError, match="decoding must be a robocache.data.frames.FrameDecoding"):
        WindowSampler(enc, {"cam": [0.0]}, decoding={"idct": "fast"})


def test_an_episode_without_frames_keeps_the_stream_and_its_statistics():
    frames = camera_frames(4, 8, 8)
    blobs = [jpeg(f.numpy()) for f in frames]
    t = torch.arange(4) * 100 * MS
    empty = EncodedFrames([], "jpeg", shape=(8, 8, 3))
    eps = [{"cam": (EncodedFrames(blobs, "jpeg"), t)}, {"cam": (empty, t[:0]), "length": 0}]
    for form in ("jpeg", "raw", "png"):
        store = EpisodeStore.from_episodes(eps, frames=form, progress=False)
        assert store["cam"].offsets.tolist() == [0, 4, 4] and "mean" in store["cam"].stats, form
    resized = EpisodeStore.from_episodes(eps, frames="jpeg", resize=(4, 4), progress=False)
    assert resized["cam"].sample_shape == (4, 4, 3)


def test_the_default_anchor_counts_frames_not_bytes():
    t_fast = torch.arange(12) * 50 * MS
    t_slow = torch.arange(3) * 200 * MS
    eps = [{"cam": (camera_frames(3, 16, 16), t_slow), "a": (torch.zeros(12, 2), t_fast)}]
    enc = EpisodeStore.from_episodes(eps, frames="jpeg", progress=False)
    assert enc["cam"].values.numel() > 12  # more bytes than the other key's samples
    assert WindowSampler(enc, {"cam": [0.0], "a": [0.0]}).anchor == "a"
