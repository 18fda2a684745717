"""robocache.augment: per-window crops, rotations and colour jitter of uint8
frames, against the reference (robocache.reference.augment, built on
torch's interpolate and grid_sample) and, where torchvision loads, against
torchvision's v2 transforms fed the same parameters."""

import math

import pytest
import torch
from conftest import requires_cuda

import robocache
from robocache import reference
from robocache.data import Augment
from robocache.data.augment import augment_generator
from robocache.ops.augment import jitter_order

try:  # torchvision is a peer, not a dependency: its parity test skips without it
    from torchvision.transforms.v2 import InterpolationMode
    from torchvision.transforms.v2 import functional as TF
except Exception:  # a torchvision built for another torch fails with RuntimeError
    TF = None

JITTER = dict(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)
CASES = {
    "whole frame": {},
    "random crop": dict(crop_size=(40, 56)),
    "resized crop": dict(crop_size=48, crop_scale=(0.2, 1.0)),
    "upscaling crop": dict(crop_size=96, crop_scale=(0.05, 0.3)),
    "rotation": dict(degrees=20),
    "jitter": JITTER,
    "all": dict(crop_size=56, crop_scale=(0.3, 1.0), degrees=10, **JITTER),
}


def frames(B=6, F=2, H=64, W=80, C=3, device="cpu", seed=0):
    """Smooth random frames (real frames are smooth; noise hides resampling errors)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (B * F, C, H, W), generator=g).float()
    x = torch.nn.functional.avg_pool2d(x, 5, 1, 2, count_include_pad=False)
    return x.round().to(torch.uint8).permute(0, 2, 3, 1).reshape(B, F, H, W, C).to(device)


def drawn(aug, images, step=0):
    B, _, H, W, _ = images.shape
    return aug.draw(B, H, W, augment_generator(0, step, 0, "test")).to(images.device)


def augmented(case, device):
    """A case's frames, drawn parameters, output size and augmented frames."""
    images = frames(device=device)
    aug = Augment(**CASES[case])
    params = drawn(aug, images)
    size = aug.output_size(64, 80)
    return images, params, size, robocache.augment(images, params, size)


def levels(a, b):
    return (a.int() - b.int()).abs()


def assert_near(got, expected, case):
    """Geometry: ties of .5 may round apart (one level); jitter is exact;
    a level apart before a contrast or brightness factor may grow by it."""
    d = levels(got.cpu(), expected.cpu())
    if case == "jitter":
        assert d.max() <= (1 if got.is_cuda else 0), d.max()
    elif case == "all":
        assert (d <= 1).float().mean() >= 0.999 and d.max() <= 4, (d.max(), (d > 1).sum())
    else:
        assert d.max() <= 1 and (d > 0).float().mean() < 0.01, (d.max(), (d > 0).sum())


@pytest.mark.parametrize("case", list(CASES))
def test_matches_reference(device, case):
    images, params, size, got = augmented(case, device)
    expected = reference.augment(images.cpu(), params.cpu(), *size)
    assert got.shape == (6, 2, *size, 3) and got.dtype == torch.uint8
    assert_near(got, expected, case)


def test_every_frame_of_a_window_shares_its_draw(device):
    images = frames(F=1, device=device).expand(6, 3, 64, 80, 3).contiguous()
    aug = Augment(**CASES["all"])
    out = robocache.augment(images, drawn(aug, images), 56)
    assert torch.equal(out[:, 0], out[:, 1]) and torch.equal(out[:, 0], out[:, 2])
    assert not torch.equal(out[0, 0], out[1, 0])


def test_output_forms(device):
    images = frames(device=device)
    aug = Augment(**CASES["all"])
    params = drawn(aug, images)
    as_uint8 = robocache.augment(images, params, 56)
    as_float = robocache.augment(images, params, 56, output="float")
    chw = robocache.augment(images, params, (56, 56), output="float_chw")
    assert as_float.dtype == torch.float32 and chw.shape == (6, 2, 3, 56, 56)
    torch.testing.assert_close(as_float, as_uint8.float() / 255, rtol=0, atol=0)
    torch.testing.assert_close(chw, as_float.permute(0, 1, 4, 2, 3), rtol=0, atol=0)


def test_grey_frames(device):
    images = frames(C=1, device=device)
    aug = Augment(crop_size=48, crop_scale=(0.3, 1.0), degrees=10, brightness=0.3, contrast=0.3)
    params = drawn(aug, images)
    got = robocache.augment(images, params, 48)
    expected = reference.augment(images.cpu(), params.cpu(), 48, 48)
    assert got.shape == (6, 2, 48, 48, 1)
    assert_near(got, expected, "all")


def test_identity_parameters_change_nothing(device):
    images = frames(device=device)
    params = torch.tensor([[0, 0, 64, 80, 0, *[math.nan] * 4, jitter_order(range(4))]] * 6)
    assert torch.equal(robocache.augment(images, params.to(device), (64, 80)), images)


def test_a_resize_along_one_axis_matches_the_reference(device):
    images = frames(device=device)
    order = jitter_order(range(4))
    params = torch.tensor(
        [
            [3, 0, 40, 80, 0, *[math.nan] * 4, order],  # rows kept, columns resized
            [10, 8, 20, 64, 0, *[math.nan] * 4, order],  # columns kept, rows resized
            [0, 0, 40, 80, 15, *[math.nan] * 4, order],
            [1, 2, 20, 64, -30, *[math.nan] * 4, order],
            [0, 0, 1, 1, 0, *[math.nan] * 4, order],  # one pixel, upscaled
            [63, 79, 1, 1, 45, *[math.nan] * 4, order],
        ]
    )
    got = robocache.augment(images, params.to(device), (40, 64))
    assert_near(got, reference.augment(images.cpu(), params, 40, 64), "resized crop")


def test_threads_do_not_change_the_values():
    images = frames(B=9, F=3)
    params = drawn(Augment(**CASES["all"]), images)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = robocache.augment(images, params, 56, output="float_chw")
        torch.set_num_threads(2)
        two = robocache.augment(images, params, 56, output="float_chw")
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)


def test_empty_batch(device):
    images = frames(device=device)[:0]
    out = robocache.augment(images, torch.zeros(0, 10, device=device), 8)
    assert out.shape == (0, 2, 8, 8, 3)


@pytest.mark.parametrize("output", ["uint8", "float_chw"])
def test_opcheck(device, output):
    images = frames(B=3, H=20, W=24, device=device)
    aug = Augment(crop_size=16, crop_scale=(0.3, 1.0), degrees=10, **JITTER)
    params = drawn(aug, images)
    torch.library.opcheck(torch.ops.robocache.augment.default, (images, params, 16, 16, output))


def test_fake_tensors_keep_symbolic_sizes():
    images = frames(B=3, H=20, W=24)
    params = drawn(Augment(crop_size=16), images)

    @torch.compile(backend="aot_eager", dynamic=True, fullgraph=True)
    def f(x, p):
        return robocache.augment(x, p, 16, output="float_chw") * 2

    out = f(images, params)
    torch.testing.assert_close(out, robocache.augment(images, params, 16, "float_chw") * 2)
    assert (
        f(frames(B=5, H=20, W=24), drawn(Augment(crop_size=16), frames(B=5, H=20, W=24))).shape[0]
        == 5
    )


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda x, p: (x.float(), p), "images must be uint8"),
        (lambda x, p: (x[0], p), "images must be 5-D"),
        (lambda x, p: (torch.cat([x, x[..., :1]], -1), p), "1 or 3 channels"),
        (lambda x, p: (x, p.double()), "params must be float32"),
        (lambda x, p: (x, p[:2]), "a row per window"),
        (lambda x, p: (x, p[:, :9]), "10 columns"),
    ],
)
def test_bad_arguments_name_what_is_wrong(device, change, message):
    images = frames(device=device)
    params = drawn(Augment(), images)
    with pytest.raises((ValueError, TypeError), match=message):
        robocache.augment(*change(images, params), 16)


def test_bad_sizes_and_forms():
    images = frames()
    params = drawn(Augment(), images)
    for size in (0, (3,), (2, -1), 2.5):
        with pytest.raises(ValueError, match="size"):
            robocache.augment(images, params, size)
    with pytest.raises(ValueError, match="output must be one of"):
        robocache.augment(images, params, 8, output="half")


@pytest.mark.parametrize(
    "column, value, message",
    [
        (0, 30.0, "must lie inside the 64 x 80 frames"),
        (2, 0.5, "whole numbers"),
        (4, math.inf, "angle must be finite"),
        (5, -0.5, "brightness factor must be >= 0"),
        (7, math.inf, "saturation factor"),
        (8, 0.7, r"hue shift must lie in \[-0.5, 0.5\]"),
        (9, 0.0, "permutation"),
    ],
)
def test_bad_parameter_values_are_refused_on_the_cpu(column, value, message):
    images = frames()
    params = drawn(Augment(), images)
    params[3, column] = value
    with pytest.raises(ValueError, match=rf"params\[3\]: .*{message}"):
        robocache.augment(images, params, 16)


def torchvision_geometry(images, params, size):
    """torchvision's resized_crop then rotate of every frame, (B, F, h, w, C)."""
    rows = []
    for b, p in enumerate(params.tolist()):
        x = images[b].permute(0, 3, 1, 2)  # (F, C, H, W): torchvision's layout
        x = TF.resized_crop(x, *(int(v) for v in p[:4]), list(size), antialias=True)
        if p[4] != 0:
            x = TF.rotate(x, p[4], interpolation=InterpolationMode.BILINEAR, fill=0)
        rows.append(x.permute(0, 2, 3, 1))
    return torch.stack(rows)


def torchvision_jitter(images, params):
    """torchvision's adjust_* of every frame in each row's order."""
    ops = (TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue)
    rows = []
    for b, p in enumerate(params.tolist()):
        x = images[b].permute(0, 3, 1, 2)
        order = int(p[9])
        for k in range(4):
            op = (order >> (2 * (3 - k))) & 3
            if not math.isnan(p[5 + op]):
                x = ops[op](x, p[5 + op])
        rows.append(x.permute(0, 2, 3, 1))
    return torch.stack(rows)


@pytest.mark.skipif(TF is None, reason="torchvision is not importable here")
@pytest.mark.parametrize("case", list(CASES))
def test_equals_torchvision_fed_the_same_parameters(device, case):
    images, params, size, got = augmented(case, device)
    geometry = torchvision_geometry(images, params, size)
    expected = torchvision_jitter(geometry, params)
    if device == "cuda" or case in ("jitter", "rotation", "random crop", "whole frame"):
        assert_near(got, expected, case)
        return
    # torchvision's CPU resize of uint8 uses fixed-point weights: a level apart
    # in about a sixth of the pixels, which a jitter chain carries further.
    # So the geometry is compared alone, and the jitter on torchvision's geometry.
    plain = params.clone()
    plain[:, 5:9] = math.nan
    assert levels(robocache.augment(images, plain, size), geometry).max() <= 1
    identity = params.clone()
    identity[:, :5] = torch.tensor([0.0, 0.0, *size, 0.0])
    assert_near(robocache.augment(geometry.contiguous(), identity, size), expected, "jitter")


@requires_cuda
def test_cuda_equals_cpu():
    images = frames()
    aug = Augment(**CASES["all"])
    params = drawn(aug, images)
    on_gpu = robocache.augment(images.cuda(), params.cuda(), 56).cpu()
    d = levels(on_gpu, robocache.augment(images, params, 56))
    assert (d <= 1).float().mean() >= 0.999 and d.max() <= 4
