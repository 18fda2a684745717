"""What a sampler does, decided once at construction: its ``Options`` (the
arguments, checked) and one ``KeyPlan`` per key (its deltas, mode,
tolerances, normalisation, image form, and where the store keeps it),
checked against the store."""

import numbers
from dataclasses import dataclass, replace

import torch

from ..._ops import WINDOW_MODES
from ..frames import FrameDecoding
from ..time import check_query_reach, seconds_to_ns

NORMALIZE = ("mean_std", "min_max")
IMAGE_FORMS = ("uint8", "float", "float_chw")
# The channel counts of an image's channel axis.
_CHANNELS = (1, 3, 4)
_WHERE = "WindowSampler"
# The options that are integers (or None), whatever their integer type.
_INTEGERS = ("drop_n_last_frames", "prefetch", "read_ahead", "graph_buffers", "rank", "world_size")


@dataclass
class KeyPlan:
    """One key's windows and what happens to them after the kernel.

    Attributes:
        key: the store's stream.
        deltas: (W,) int64 ns from the anchor time, on the store's device.
        mode: ``nearest``, ``previous``, ``linear`` or ``mean``.
        interval: ns of ``mean``'s interval (0: none).
        tolerance: ns beyond which a sample read is padding (-1: none).
        to_float: uint8 image frames become float32 in [0, 1].
        to_chw: (H, W, C) image frames become (C, H, W).
        scale, shift: ``x * scale + shift`` normalises the key (float32
            tensors of the sample shape, on the batch's device), or None.
        place: where the store keeps its values (``store.placement``):
            ``"cuda"``, ``"pinned"``, ``"mapped"`` or ``"cpu"``.
        encoded: its frames are stored encoded (JPEG or PNG).
        cut_on: the device its windows are cut on: its times' device, the
            host for encoded frames (cut over row numbers, then decoded;
            the sampler moves those the GPU decodes to the GPU).
    """

    key: str
    deltas: torch.Tensor
    mode: str
    interval: int
    tolerance: int
    to_float: bool = False
    to_chw: bool = False
    scale: torch.Tensor = None
    shift: torch.Tensor = None
    place: str = "cpu"
    encoded: bool = False
    cut_on: torch.device = None


@dataclass(frozen=True)
class Options:
    """A sampler's arguments past the store and ``delta_timestamps``,
    checked (see WindowSampler). Per-key dicts are checked against the keys
    by ``plan_keys``; ``prefetch`` None is decided per store (read.py)."""

    modes: dict = None
    interval_s: dict = None
    tolerance_s: dict = None
    edge_tolerance: int = 0
    anchor: str = None
    batch_size: int = 256
    shuffle: bool = True
    seed: int = 0
    drop_last: bool = False
    drop_n_last_frames: int = 0
    device: torch.device = None
    normalize: dict = None
    images: object = "uint8"
    key_age: bool = False
    rank: int = None
    world_size: int = None
    cuda_graph: bool = None
    graph_buffers: int = None
    prefetch: int = None
    read_ahead: int = 2
    decoding: FrameDecoding = None
    augment: dict = None


def check_options(**given):
    """``Options`` of the arguments given, each checked on its own. Integer
    arguments take any integer type (``numpy.int64`` too), never bool."""
    for name in _INTEGERS:
        if name in given:
            given[name] = _as_int(given[name])
    options = Options(**given)
    for name in ("drop_last", "shuffle", "key_age"):
        value = getattr(options, name)
        if not isinstance(value, bool):
            raise ValueError(f"{_WHERE}: {name} must be True or False; got {value!r}")
    n = options.drop_n_last_frames
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
        raise ValueError(f"{_WHERE}: drop_n_last_frames must be an int >= 0; got {n!r}")
    for name in ("prefetch", "read_ahead"):
        value = getattr(options, name)
        if value is None and name == "prefetch":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{_WHERE}: {name} must be an int >= 0; got {value!r}")
    images = options.images
    if not isinstance(images, (str, dict)):
        raise ValueError(f"{_WHERE}: images must be a str or a dict key -> str; got {images!r}")
    if isinstance(images, str):
        image_form_of(images, None)
    decoding = options.decoding if options.decoding is not None else FrameDecoding()
    if not isinstance(decoding, FrameDecoding):
        raise TypeError(
            f"{_WHERE}: decoding must be a robocache.data.frames.FrameDecoding; got "
            f"{type(decoding).__name__}"
        )
    return replace(
        options,
        batch_size=positive_int(options.batch_size, "batch_size"),
        drop_n_last_frames=int(n),
        decoding=decoding,
    )


def check_per_key(delta_timestamps, **options):
    """The per-key dicts (modes, interval_s, ...) as dicts naming only keys of
    ``delta_timestamps``."""
    if not isinstance(delta_timestamps, dict) or not delta_timestamps:
        raise ValueError(f"{_WHERE}: delta_timestamps must be a non-empty dict key -> deltas")
    out = {}
    for what, d in options.items():
        if d is None:
            d = {}
        if not isinstance(d, dict):
            raise TypeError(f"{_WHERE}: {what} must be a dict key -> value; got {d!r}")
        unknown = sorted(set(d) - set(delta_timestamps))
        if unknown:
            raise ValueError(f"{_WHERE}: {what} names keys not in delta_timestamps: {unknown}")
        out[what] = dict(d)
    return out


def image_layout(key, shape):
    """``"hwc"`` or ``"chw"`` for a frame of ``shape`` (its channel axis is
    the one of 1, 3 or 4 entries), None for a sample that is not a frame;
    a ValueError where both ends could be the channels."""
    if len(shape) != 3:
        return None
    first, last = shape[0] in _CHANNELS, shape[-1] in _CHANNELS
    if first and last:
        raise ValueError(
            f"{_WHERE}: images: the frames of {key!r} are {tuple(shape)}, which could be (H, W, "
            f"C) or (C, H, W); give that key images='uint8' or 'float' (images={{{key!r}: "
            "'float'}), which keep the stored layout"
        )
    return "hwc" if last else "chw" if first else None


def plan_keys(store, delta_timestamps, options, device):
    """Every key's KeyPlan, in ``delta_timestamps``' order. Where each key
    lives is asked of the store once (``store.placement``)."""
    per_key = check_per_key(
        delta_timestamps,
        modes=options.modes,
        interval_s=options.interval_s,
        tolerance_s=options.tolerance_s,
        normalize=options.normalize,
    )
    if isinstance(options.images, dict):
        check_per_key(delta_timestamps, images=options.images)
    placement = store.placement
    for key in delta_timestamps:
        store[key]  # a key the store lacks: its KeyError names the store's keys
    reach = store.time_range()  # anchor time + delta must stay within int64 ns
    return [
        plan_key(
            store,
            key,
            deltas,
            per_key["modes"].get(key, "nearest"),
            per_key["interval_s"].get(key),
            per_key["tolerance_s"].get(key),
            per_key["normalize"].get(key),
            image_form_of(options.images, key),
            device,
            placement[key],
            reach,
        )
        for key, deltas in delta_timestamps.items()
    ]


def plan_key(
    store, key, deltas, mode, interval, tolerance, normalize, image_form, device, place, reach=None
):
    """One key's KeyPlan (see WindowSampler's arguments); ``reach``: the
    store's ``time_range()``, which every anchor time + delta must keep
    within int64 nanoseconds."""
    stream = store[key]
    what = f"{_WHERE}: delta_timestamps[{key!r}]"
    if torch.is_tensor(deltas):
        if deltas.dim() != 1:
            raise TypeError(
                f"{what} must be a 1-D sequence of seconds; got a {deltas.dim()}-D tensor"
            )
        deltas = deltas.tolist()
    if isinstance(deltas, (str, bytes)) or not hasattr(deltas, "__iter__"):
        raise TypeError(f"{what} must be a sequence of seconds (e.g. [-0.1, 0.0]); got {deltas!r}")
    deltas = list(deltas)
    if not deltas:
        raise ValueError(f"{what} is empty")
    deltas_ns = [seconds_to_ns(d, f"{what}[{i}]") for i, d in enumerate(deltas)]
    check_query_reach(deltas_ns, reach, what)
    if not isinstance(mode, str) or mode not in WINDOW_MODES:
        raise ValueError(
            f"{_WHERE}: modes[{key!r}] must be one of {', '.join(map(repr, WINDOW_MODES))}; "
            f"got {mode!r}"
        )
    if mode in ("linear", "mean") and not stream.sample_dtype.is_floating_point:
        kind = f"{stream.encoding.codec} frames" if stream.encoding else stream.sample_dtype
        raise ValueError(
            f"{_WHERE}: mode {mode!r} for {key!r} needs floating values; the stream "
            f"holds {kind} (use 'nearest' or 'previous')"
        )
    if mode == "mean" and interval is None:
        ordered = sorted(deltas_ns)
        gaps = [b - a for a, b in zip(ordered, ordered[1:]) if b > a]
        if not gaps:
            raise ValueError(f"{_WHERE}: mode 'mean' for {key!r} needs interval_s (one delta)")
        interval_ns = min(gaps)
    else:
        interval_ns = 0 if interval is None else _duration(interval, f"interval_s[{key!r}]")
    tolerance_ns = -1 if tolerance is None else _duration(tolerance, f"tolerance_s[{key!r}]")
    plan = KeyPlan(
        key,
        torch.tensor(deltas_ns, dtype=torch.int64, device=store.device),
        mode,
        interval_ns,
        tolerance_ns,
        place=place,
        encoded=stream.encoding is not None,
        # Encoded frames are cut over row numbers, then decoded: on the host
        # unless the GPU decodes them (the sampler's Reader knows).
        cut_on=torch.device("cpu") if stream.encoding is not None else stream.times.device,
    )
    _plan_image(plan, stream.sample_shape, stream.sample_dtype, image_form)
    if normalize is not None:
        scale, shift = normalizer(key, stream, normalize)
        if plan.to_float:  # the statistics are of the stored 0..255 values
            scale = scale * 255
        plan.scale, plan.shift = scale.to(device), shift.to(device)
    return plan


def _duration(seconds, what):
    ns = seconds_to_ns(seconds, f"{_WHERE}: {what}")
    if ns < 0:
        raise ValueError(f"{_WHERE}: {what} must be >= 0; got {ns} ns")
    return ns


def edge_tolerance_ns(seconds):
    return _duration(seconds, "edge_tolerance_s")


def image_form_of(images, key):
    """The image form asked for ``key``: ``images`` itself, or its entry
    (``"uint8"``, as stored, for keys a dict leaves out)."""
    form = images.get(key, "uint8") if isinstance(images, dict) else images
    if form not in IMAGE_FORMS:
        name = f"images[{key!r}]" if isinstance(images, dict) else "images"
        raise ValueError(f"{_WHERE}: {name} must be 'uint8', 'float' or 'float_chw'; got {form!r}")
    return form


def _plan_image(plan, shape, dtype, form):
    """``float``: uint8 frames to float32 in [0, 1]; ``float_chw``: that, and
    (H, W, C) frames to (C, H, W), float frames included. Frames are samples
    of 2 dimensions (grey) or 3; other keys are left as stored."""
    if form == "uint8" or len(shape) not in (2, 3):
        return
    # (H, W) grey frames, and (H, W, C) or (C, H, W) frames in either layout.
    plan.to_float = dtype == torch.uint8
    if form == "float_chw" and len(shape) == 3:
        # Encoded frames decode as (H, W, C), as their encoding records.
        plan.to_chw = plan.encoded or image_layout(plan.key, shape) == "hwc"


def normalizer(key, stream, how):
    """(scale, shift) with x * scale + shift the normalized value (float32).
    ``how``: a name, or (name, mask): a bool per entry of the sample's last
    axis, False where the entry is left as it is (Octo's
    ``action_normalization_mask``)."""
    mask = None
    if isinstance(how, (tuple, list)) and len(how) == 2 and how[0] in NORMALIZE:
        how, mask = how
        width = stream.sample_shape[-1] if stream.sample_shape else 1
        if (
            isinstance(mask, (str, bytes))
            or not hasattr(mask, "__len__")
            or len(mask) != width
            or not all(isinstance(m, bool) for m in mask)
        ):
            raise ValueError(
                f"{_WHERE}: normalize[{key!r}]: the mask must be {width} bools, one per entry "
                f"of the samples' last axis; got {mask!r}"
            )
    if how not in NORMALIZE:
        raise ValueError(
            f"{_WHERE}: normalize[{key!r}] must be 'mean_std' or 'min_max'; got {how!r}"
        )
    needed = ("mean", "std") if how == "mean_std" else ("min", "max")
    missing = [s for s in needed if s not in stream.stats]
    if missing:
        raise ValueError(
            f"{_WHERE}: normalize[{key!r}] = {how!r} needs the store's {missing} statistics"
        )
    eps = 1e-8
    if how == "mean_std":
        scale = 1 / (stream.stats["std"] + eps)
        shift = -stream.stats["mean"] * scale
    else:
        scale = 2 / (stream.stats["max"] - stream.stats["min"] + eps)
        shift = -1 - stream.stats["min"] * scale
    if mask is not None:
        keep = ~torch.tensor(mask, device=scale.device)
        if scale.dim() == 0:  # a scalar key: a mask of one entry
            keep = keep.reshape(())
        scale, shift = scale.masked_fill(keep, 1.0), shift.masked_fill(keep, 0.0)
    return scale.float(), shift.float()


def masked_to(how, stream):
    """A normalize entry (name, mask) with its mask cut to ``stream``'s width."""
    if isinstance(how, (tuple, list)) and len(how) == 2 and isinstance(how[1], (list, tuple)):
        shape = stream.sample_shape
        return (how[0], list(how[1])[: shape[-1] if shape else 1])
    return how


def _as_int(value):
    """An integer of any type as an int; anything else (bool too) as given,
    for its own check to refuse by name."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return value


def positive_int(x, what):
    """An int >= 1 (bool refused)."""
    if isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < 1:
        raise ValueError(f"{_WHERE}: {what} must be a positive int; got {x!r}")
    return int(x)
