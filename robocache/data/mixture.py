"""Many stores as one dataset: ``Mixture`` holds each store with its weight
and a map of its keys onto the mixture's names. ``WindowSampler`` takes it
in place of a store (sampler/mixture_batches.py draws its batches)."""

import copy
import math
import numbers

import torch

_WHERE = "Mixture"


class Mixture:
    """Stores sampled together, each window's store drawn by weight.

    Args:
        entries: a list of ``(store, weight)`` or ``(store, weight,
            key_map)``: ``key_map`` maps the store's key names onto the
            mixture's (keys it leaves out keep their names). Weights are
            finite numbers >= 0, one of them > 0; a store of weight 0 is
            never drawn, so a sampler neither samples it nor checks it (it
            may lack the keys asked for, or have no anchors).
        balance: scale each weight by the store's frame count (the samples
            of its largest stream), as Octo's ``balance_weights`` does.
        epoch_steps: the batches a sampler's epoch draws (default: the
            anchors of the stores of weight > 0 over the batch size and the
            ranks, rounded up).
        fill: the value of a floating key's windows in a store that lacks
            the key, and of the widths a narrower store lacks (other keys:
            0).
        pack: whether the sampler packs the asked keys of every store into
            one store on their CUDA device (a copy of those keys), so that a
            batch is one launch replayed from a CUDA graph: None (the
            default) where every store keeps them raw there and the copy
            takes at most half the free device memory; True: always (else
            an error); False: never (each store's part cut by its own
            sampler).

    Every store keeps its own rates, statistics and episodes; a key a store
    lacks comes out zeros with ``<key>_is_pad`` all True.
    """

    def __init__(self, entries, balance=False, *, epoch_steps=None, fill=0.0, pack=None):
        if not isinstance(entries, (list, tuple)) or not entries:
            raise ValueError(
                f"{_WHERE}: entries must be a non-empty list of (store, weight[, key_map])"
            )
        if not isinstance(balance, bool):
            raise ValueError(f"{_WHERE}: balance must be True or False; got {balance!r}")
        if epoch_steps is not None and (
            isinstance(epoch_steps, bool)
            or not isinstance(epoch_steps, numbers.Integral)
            or epoch_steps < 1
        ):
            raise ValueError(f"{_WHERE}: epoch_steps must be an int >= 1; got {epoch_steps!r}")
        epoch_steps = None if epoch_steps is None else int(epoch_steps)
        if isinstance(fill, bool) or not isinstance(fill, numbers.Real):
            raise ValueError(f"{_WHERE}: fill must be a number; got {fill!r}")
        if pack not in (None, True, False):
            raise ValueError(f"{_WHERE}: pack must be None, True or False; got {pack!r}")
        self.epoch_steps, self.fill, self.pack = epoch_steps, float(fill), pack
        from .store import EpisodeStore

        self.stores, self.key_maps, weights = [], [], []
        for i, entry in enumerate(entries):
            if not isinstance(entry, (tuple, list)) or len(entry) not in (2, 3):
                raise ValueError(
                    f"{_WHERE}: entry {i} must be (store, weight) or (store, weight, key_map); "
                    f"got {type(entry).__name__}"
                )
            store, weight = entry[0], entry[1]
            key_map = entry[2] if len(entry) == 3 else {}
            if not isinstance(store, EpisodeStore):
                raise TypeError(f"{_WHERE}: entry {i}'s store must be an EpisodeStore")
            if (
                isinstance(weight, bool)
                or not isinstance(weight, numbers.Real)
                or not math.isfinite(weight)
                or weight < 0
            ):
                raise ValueError(
                    f"{_WHERE}: entry {i}'s weight must be a finite number >= 0; got {weight!r}"
                )
            self.stores.append(store)
            self.key_maps.append(_check_key_map(store, key_map, i))
            weights.append(float(weight))
        self.balance = balance
        self.given_weights = weights
        if max(weights) <= 0:
            raise ValueError(f"{_WHERE}: the weights sum to 0; at least one must be > 0")
        if balance:
            frames = [_frames(s) for s in self.stores]
            weights = [w * f for w, f in zip(_normalised(weights), frames)]
            if max(weights) <= 0:
                raise ValueError(
                    f"{_WHERE}: balance=True: every store of weight > 0 has no frames, so the "
                    f"weights scaled by the frame counts {frames} sum to 0"
                )
        self.weights = torch.tensor(_normalised(weights), dtype=torch.float64)

    def __len__(self):
        return len(self.stores)

    def drawn(self):
        """(a Mixture of the stores of weight > 0, their numbers in this
        one): this mixture itself where every weight is > 0. A store of
        weight 0 is never drawn, so a sampler neither samples nor checks
        it."""
        kept = [i for i, w in enumerate(self.weights.tolist()) if w > 0]
        if len(kept) == len(self.stores):
            return self, kept
        part = copy.copy(self)
        part.stores = [self.stores[i] for i in kept]
        part.key_maps = [self.key_maps[i] for i in kept]
        part.given_weights = [self.given_weights[i] for i in kept]
        part.weights = self.weights[kept]  # the same draws: the stores left out add 0
        return part, kept

    def keys(self):
        """The mixture's key names, in order of first appearance."""
        seen = {}
        for store, key_map in zip(self.stores, self.key_maps):
            for key in store.keys():
                seen.setdefault(key_map.get(key, key), None)
        return list(seen)

    def store_key(self, i, key):
        """Store i's name for the mixture's ``key``, or None where it lacks it."""
        for own, mixed in self.key_maps[i].items():
            if mixed == key:
                return own
        if key in self.stores[i] and key not in self.key_maps[i]:
            return key
        return None

    def pooled_stats(self, key):
        """``key``'s statistics over every store that has it, each store's
        samples counted once (mean and std pooled, min and max of all), for
        users who want one normalisation; the sampler normalises each store
        with its own."""
        parts = []
        for i, store in enumerate(self.stores):
            own = self.store_key(i, key)
            if own is not None and {"mean", "std"} <= set(store[own].stats):
                stream = store[own]
                parts.append((stream.num_samples, stream.stats))
        if not parts:
            raise ValueError(f"{_WHERE}.pooled_stats: no store has statistics of {key!r}")
        shapes = {tuple(s["mean"].shape) for _, s in parts}
        if len(shapes) > 1:
            raise ValueError(
                f"{_WHERE}.pooled_stats: {key!r} has samples of shapes {sorted(shapes)} in "
                "different stores; pooled statistics need one shape"
            )
        n = sum(count for count, _ in parts)
        mean = sum(count * s["mean"].double().cpu() for count, s in parts) / n
        second = (
            sum(
                count * (s["std"].double().cpu() ** 2 + s["mean"].double().cpu() ** 2)
                for count, s in parts
            )
            / n
        )
        out = {"mean": mean, "std": (second - mean**2).clamp(min=0).sqrt()}
        if all("min" in s and "max" in s for _, s in parts):
            out["min"] = torch.stack([s["min"].double().cpu() for _, s in parts]).amin(0)
            out["max"] = torch.stack([s["max"].double().cpu() for _, s in parts]).amax(0)
        return out

    def __repr__(self):
        lines = [f"Mixture({len(self)} stores, balance={self.balance})"]
        for i, (store, w) in enumerate(zip(self.stores, self.weights.tolist())):
            lines.append(
                f"  {i}: weight {w:.3f}, {store.num_episodes} episodes, keys "
                f"{[self.key_maps[i].get(k, k) for k in store.keys()]}"
            )
        return "\n".join(lines)


def _normalised(weights):
    """``weights`` (finite, >= 0, one > 0) over their sum; where the sum
    overflows (weights near the float range's top), scaled by the largest
    first."""
    if not math.isfinite(sum(weights)):
        largest = max(weights)
        weights = [w / largest for w in weights]
    total = sum(weights)
    return [w / total for w in weights]


def _frames(store):
    return max(s.num_samples for s in store.streams.values())


def _check_key_map(store, key_map, i):
    if not isinstance(key_map, dict):
        raise TypeError(f"{_WHERE}: entry {i}'s key_map must be a dict store key -> name")
    lacking = sorted(k for k in key_map if k not in store)
    if lacking:
        raise ValueError(
            f"{_WHERE}: entry {i}'s key_map maps {lacking}, which the store lacks; its keys "
            f"are {sorted(store.keys())}"
        )
    names = {}
    for key in store.keys():
        name = key_map.get(key, key)
        if not isinstance(name, str):
            raise TypeError(f"{_WHERE}: entry {i}'s key_map maps {key!r} to {name!r}, not a str")
        if name in names:
            raise ValueError(
                f"{_WHERE}: entry {i}'s key_map gives the name {name!r} to both "
                f"{names[name]!r} and {key!r}"
            )
        names[name] = key
    return dict(key_map)
