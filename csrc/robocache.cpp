// The one place where robocache's operator schemas are defined.
//
// Kernels are registered per dispatch key next to their code:
//   csrc/cpu/<op>.cpp   (CPU)    csrc/cuda/<op>.cu   (CUDA)    csrc/meta/<op>.cpp (Meta)
// and each of the three starts with the op's one symbolic check,
// csrc/checks/<op>.cpp (declared in robocache/checks.h).
// Autograd is registered from Python (robocache/_ops.py); every backward is
// itself one of the operators below, so backward graphs trace under
// torch.compile and torch.export.
#include <Python.h>
#include <torch/library.h>

extern "C" {
// Importing robocache._C only loads this shared library, which runs the
// static registrations below. C++ deployments load the same library with
// dlopen (or torch::load_library) to make the operators known to the dispatcher.
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {
      PyModuleDef_HEAD_INIT, "_C", "robocache operator library (registrations only)", -1, nullptr};
  return PyModule_Create(&module_def);
}
}

TORCH_LIBRARY(robocache, m) {
  m.def(
      "resample(Tensor values, Tensor times, Tensor query_times, Tensor? lengths=None, "
      "str mode=\"linear\") -> Tensor",
      {at::Tag::pt2_compliant_tag});
  // Returns (grad_values, grad_query_times); a gradient that was not asked for
  // comes back as an empty (0,) tensor.
  m.def(
      "_resample_backward(Tensor grad_out, Tensor values, Tensor times, Tensor query_times, "
      "Tensor? lengths, str mode, bool values_grad, bool query_grad) -> (Tensor, Tensor)",
      {at::Tag::pt2_compliant_tag});
  // K streams resampled onto one timeline and concatenated along channels:
  // (B, T, sum D_k). lengths: None or (K, B), a row per stream; modes: one
  // mode for every stream, or K comma-separated ("previous,linear,linear").
  // (Plain Tensor? and str rather than Tensor?[] and str[]: AOTInductor's
  // proxy executor passes these reliably.)
  m.def(
      "fuse(Tensor[] values, Tensor[] times, Tensor query_times, Tensor? lengths=None, "
      "str modes=\"linear\") -> Tensor",
      {at::Tag::pt2_compliant_tag});
  // Returns (grad_values per stream, grad_query_times); gradients not asked
  // for come back as empty (0,) tensors.
  m.def(
      "_fuse_backward(Tensor grad_out, Tensor[] values, Tensor[] times, Tensor query_times, "
      "Tensor? lengths, str modes, bool[] values_grad, bool query_grad) "
      "-> (Tensor[], Tensor)",
      {at::Tag::pt2_compliant_tag});
  // Point clouds into dense voxel grids. reduce: occupancy | count | sum | mean | max.
  // voxel_size_tensor and origin_tensor, when given, replace voxel_size and
  // origin: (3,) (voxel_size also (1,)) or (B, 3) per cloud, on the points'
  // device, read by the kernels (graph inputs: a moving grid never
  // recompiles a compiled policy).
  m.def(
      "voxelize(Tensor points, Tensor? features, Tensor? lengths, SymInt[] grid_size, "
      "float[] voxel_size, float[] origin, str reduce=\"occupancy\", "
      "Tensor? voxel_size_tensor=None, Tensor? origin_tensor=None) -> Tensor",
      {at::Tag::pt2_compliant_tag});
  // Gradient of features for sum, mean and max; `result` is voxelize's output
  // (read for max, whose gradient goes to the lowest-index point at the max).
  m.def(
      "_voxelize_backward(Tensor grad, Tensor points, Tensor features, Tensor? lengths, "
      "SymInt[] grid_size, float[] voxel_size, float[] origin, str reduce, Tensor result, "
      "Tensor? voxel_size_tensor=None, Tensor? origin_tensor=None) -> Tensor",
      {at::Tag::pt2_compliant_tag});
  // Windows cut from a packed stream (every episode's samples back to
  // back; episode e owns rows [offsets[e], offsets[e + 1])): for window b,
  // the samples of episode[b] at query_times[b, :] (int64 ns). mode: nearest |
  // previous (any dtype) | linear | mean (floating; mean averages the samples
  // in (q - interval, q]). Returns (out (B, W, D), is_pad (B, W) bool,
  // age (B, W) int64 ns). tolerance -1: none.
  m.def(
      "sample_windows(Tensor values, Tensor times, Tensor offsets, Tensor episode, "
      "Tensor query_times, str mode=\"nearest\", int interval=0, int tolerance=-1, "
      "int edge_tolerance=0) -> (Tensor, Tensor, Tensor)",
      {at::Tag::pt2_compliant_tag});
  // Gradient of values (num_values = N rows), in grad_out's dtype.
  m.def(
      "_sample_windows_backward(Tensor grad_out, Tensor times, Tensor offsets, Tensor episode, "
      "Tensor query_times, str mode, int interval, int tolerance, int edge_tolerance, "
      "SymInt num_values) -> Tensor",
      {at::Tag::pt2_compliant_tag});
  // Windows of K packed streams around B anchor rows, in one launch: row
  // index[b] of the anchor stream (anchor_offsets, anchor_times) lies in
  // episode[b]; stream k is sampled at anchor_times[index[b]] + deltas[k]
  // (W_k,) within that episode, as sample_windows does. Every stream has
  // the anchor stream's E episodes. modes: one, or K comma-separated;
  // intervals and tolerances: empty, one, or K. anchor_rows: tables with a
  // row per anchor-stream row (N_anchor, *shape_j), gathered at index in the
  // same launch. Returns (out[k] (B, W_k, *shape_k), is_pad[k] (B, W_k),
  // age[k] (B, W_k), episode (B,), rows[j] (B, *shape_j)).
  m.def(
      "anchor_windows(Tensor[] values, Tensor[] times, Tensor[] offsets, Tensor[] deltas, "
      "Tensor anchor_offsets, Tensor anchor_times, Tensor index, Tensor[] anchor_rows, "
      "str modes=\"nearest\", int[] intervals=[], int[] tolerances=[], int edge_tolerance=0) "
      "-> (Tensor[], Tensor[], Tensor[], Tensor, Tensor[])",
      {at::Tag::pt2_compliant_tag});
  // Per-window augmentation of uint8 frames (B, F, H, W, C), C 1 or 3: window
  // b's F frames share params[b] (float32, 10 columns: top, left, crop
  // height, crop width, angle in degrees counter-clockwise, brightness,
  // contrast, saturation, hue, jitter order; NaN factors are not applied).
  // The crop is resized to (height, width) (bilinear, antialiased), rotated
  // about its centre (bilinear, zero fill), then jittered in the row's order,
  // as torchvision's v2 transforms do on uint8 images. output: uint8 (B, F,
  // height, width, C) | float (the same in [0, 1]) | float_chw (B, F, C,
  // height, width).
  m.def(
      "augment(Tensor images, Tensor params, SymInt height, SymInt width, "
      "str output=\"uint8\") -> Tensor",
      {at::Tag::pt2_compliant_tag});
  // Windows drawn from a mixture of S stores whose anchors lie back to back:
  // window i's key is base[0] + i (int64), and its hash picks a store by
  // weights (S,) float64 (store s with probability weights[s] / their sum),
  // then an anchor uniformly among that store's counts[s]. Returns (store
  // (B,) int64, position (B,) int64: the anchor's index among all stores'
  // anchors). The same keys draw the same on every device.
  m.def(
      "draw_mixture(Tensor base, SymInt batch_size, Tensor weights, Tensor counts) "
      "-> (Tensor, Tensor)",
      {at::Tag::pt2_compliant_tag});
}
