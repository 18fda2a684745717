// The io classes' registrations, made in one place (register.cpp) in the
// order their signatures name one another: a class is registered before a
// class whose methods take it.
#pragma once

#include <torch/library.h>

namespace robocache::io {

void register_window_rows(torch::Library& m);  // WindowRows, EpochRows
#if defined(ROBOCACHE_WITH_CUDA)
void register_row_staging(torch::Library& m);  // RowStaging, RowRing
void register_mapped_feed(torch::Library& m);  // MappedFeed
#endif

}  // namespace robocache::io
