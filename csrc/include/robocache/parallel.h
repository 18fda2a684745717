// parallel_over: the CPU kernels' loops split between ATen's intra-op threads.
//
// at::parallel_for is a header template whose threads come from OpenMP
// pragmas. This library is compiled without OpenMP, so there it would run
// every part on the calling thread. TensorIterator's for_each runs
// at::parallel_for inside libtorch, which has the threads: the loop is handed
// to it over an index of the items, and each part it gets is a run of
// consecutive items.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>

#include <cstdint>

namespace robocache {

// body(b, e) over parts of [begin, end), each of grain items at least, on
// ATen's intra-op threads (at::get_num_threads()); on the calling thread
// where there is one part, one thread, or it runs inside such a part.
template <typename Body>
void parallel_over(int64_t begin, int64_t end, int64_t grain, const Body& body) {
  if (end <= begin)
    return;
#ifdef INTRA_OP_PARALLEL
  at::parallel_for(begin, end, grain, body);
#else
  if (end - begin <= grain || at::get_num_threads() == 1 || at::in_parallel_region()) {
    body(begin, end);
    return;
  }
  at::Tensor index = at::arange(begin, end, at::TensorOptions().dtype(at::kLong));
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .add_output(index)
                                .resize_outputs(false)
                                .check_all_same_dtype(false)
                                .build();
  iter.for_each(
      [&](char** data, const int64_t* strides, int64_t size0, int64_t size1) {
        for (int64_t j = 0; j < size1; ++j) {
          const int64_t first = *reinterpret_cast<const int64_t*>(data[0] + j * strides[1]);
          body(first, first + size0);
        }
      },
      grain);
#endif
}

}  // namespace robocache
