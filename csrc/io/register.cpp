// The native io classes: torch.classes.robocache.RowReader, WindowRows and
// EpochRows (every build), and in CUDA builds RowStaging, RowRing and
// MappedFeed, registered in this order (a class before the classes whose
// methods take it).
#include "register.h"

#include "row_reader.h"

using robocache::io::RowReader;

TORCH_LIBRARY_FRAGMENT(robocache, m) {
  m.class_<RowReader>("RowReader")
      .def(torch::init<int64_t>())
      .def("submit", &RowReader::submit)
      .def("submit_checks", &RowReader::submit_checks)
      .def("wait", &RowReader::wait)
      .def("read", &RowReader::read)
      .def("read_extents", &RowReader::read_extents)
      .def("close", &RowReader::close)
      .def("pending", &RowReader::pending)
      .def("threads", [](const c10::intrusive_ptr<RowReader>& self) { return self->threads(); });
  robocache::io::register_window_rows(m);
#if defined(ROBOCACHE_WITH_CUDA)
  robocache::io::register_row_staging(m);
  robocache::io::register_mapped_feed(m);
#endif
}
