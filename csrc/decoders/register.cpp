// The GPU frame decoder's classes: torch.classes.robocache.FrameDecoder and
// torch.classes.robocache.FrameQueue (CUDA builds only).
#include <torch/library.h>

#include "frame_decoder.h"
#include "frame_queue.h"

using robocache::decoders::FrameDecoder;
using robocache::decoders::FrameQueue;

TORCH_LIBRARY_FRAGMENT(robocache, m) {
  m.class_<FrameDecoder>("FrameDecoder")
      .def(torch::init<std::string, std::string, int64_t, double, double, int64_t, std::string,
                       bool>())
      .def("decode", &FrameDecoder::decode)
      .def("uses_batched",
           [](const c10::intrusive_ptr<FrameDecoder>& self) { return self->uses_batched(); })
      .def("uses_kernels",
           [](const c10::intrusive_ptr<FrameDecoder>& self) { return self->uses_kernels(); })
      .def("batched_error",
           [](const c10::intrusive_ptr<FrameDecoder>& self) { return self->batched_error(); });
  m.class_<FrameQueue>("FrameQueue")
      .def(torch::init<c10::intrusive_ptr<FrameDecoder>, std::vector<at::Tensor>,
                       std::vector<at::Tensor>, std::vector<int64_t>, std::vector<int64_t>,
                       std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>,
                       int64_t, int64_t>())
      .def("extend", &FrameQueue::extend)
      .def("take", &FrameQueue::take)
      .def("landed", &FrameQueue::landed)
      .def("release", &FrameQueue::release)
      .def("failure", &FrameQueue::failure)
      .def("close", &FrameQueue::close);
}
