"""robocache's benchmark scripts, one a question; run each from the
checkout's root as ``python -m benchmark.<script> --help``:

- ops: inside one operator call (per-kernel times, Nsight Compute cases);
- sampler: WindowSampler against the peers that cut the same windows;
- ingest: each loader, from its files to a store;
- frames: JPEG frames against raw (size), and each decoder's rate;
- mixture: a mixture batch against a single store's;
- e2e: what the data path costs a training step (its loaders part in
  e2e_loaders.py, its policies in e2e_policies.py, its measurement in
  e2e_measure.py).

The datasets they write come from the tests' writers (``tests/fixtures/``,
imported by writers.py).
``python -m robocache.bench`` is the operators' benchmark, part of the package.
"""
