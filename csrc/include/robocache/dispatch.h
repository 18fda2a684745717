// Dtype dispatch shared by the kernels: values x times.
#pragma once

#include <ATen/Dispatch.h>

#include <type_traits>

// Runs __VA_ARGS__ (a lambda) with `scalar_t` bound to the times' C++ type.
#define ROBOCACHE_DISPATCH_TIME_TYPES(TYPE, NAME, ...)                           \
  AT_DISPATCH_SWITCH(TYPE, NAME,                                                 \
                     AT_DISPATCH_CASE(at::kFloat, __VA_ARGS__) AT_DISPATCH_CASE( \
                         at::kDouble, __VA_ARGS__) AT_DISPATCH_CASE(at::kLong, __VA_ARGS__))

// Runs __VA_ARGS__ with `scalar_t` bound to the values' C++ type.
#define ROBOCACHE_DISPATCH_VALUE_TYPES(TYPE, NAME, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, TYPE, NAME, __VA_ARGS__)

namespace robocache {

// Half types compute in float32; double stays double.
template <typename T>
using compute_t = std::conditional_t<std::is_same<T, double>::value, double, float>;

}  // namespace robocache
