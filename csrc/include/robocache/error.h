// Error checks whose messages are built as std::string inside robocache.
//
// TORCH_CHECK formats its message with a std::ostringstream made in this
// library and, for SymInt or Device arguments, calls into libc10's
// operator<<. Where this library and libtorch are built against different
// libstdc++ versions (a local GCC build against a torch wheel), formatting a
// number that way can crash in the ostringstream's locale facets. Here
// numbers go through std::to_string / snprintf and torch types through their
// own str(), and TORCH_CHECK only ever sees one string. The message is built
// only when the check fails.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/SymBool.h>
#include <c10/core/SymInt.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>
#include <c10/util/string_view.h>

#include <cstdio>
#include <string>
#include <type_traits>

namespace robocache {
namespace detail {

inline void append(std::string& s, const char* x) {
  s += x;
}
inline void append(std::string& s, const std::string& x) {
  s += x;
}
inline void append(std::string& s, c10::string_view x) {
  s.append(x.data(), x.size());
}
inline void append(std::string& s, char x) {
  s += x;
}
template <typename T, std::enable_if_t<std::is_integral<T>::value, int> = 0>
inline void append(std::string& s, T x) {
  s += std::to_string(x);
}
inline void append(std::string& s, double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  s += buf;
}
inline void append(std::string& s, const c10::SymInt& x) {
  if (auto v = x.maybe_as_int()) {
    s += std::to_string(*v);
  } else {
    s += x.toSymNode()->str();
  }
}
inline void append(std::string& s, at::ScalarType x) {
  s += c10::toString(x);
}
inline void append(std::string& s, const c10::Device& x) {
  s += x.str();
}
template <typename T>
inline void append(std::string& s, c10::ArrayRef<T> xs) {
  s += '[';
  for (size_t i = 0; i < xs.size(); ++i) {
    if (i)
      s += ", ";
    append(s, xs[i]);
  }
  s += ']';
}
template <typename T>
inline void append(std::string& s, const std::vector<T>& xs) {
  append(s, c10::ArrayRef<T>(xs));
}

}  // namespace detail

template <typename... Args>
std::string message(const Args&... args) {
  std::string s;
  (detail::append(s, args), ...);
  return s;
}

}  // namespace robocache

#define ROBOCACHE_CHECK_WITH(TORCH_MACRO, cond, ...)         \
  do {                                                       \
    if (C10_UNLIKELY(!(cond))) {                             \
      TORCH_MACRO(false, ::robocache::message(__VA_ARGS__)); \
    }                                                        \
  } while (0)

// ValueError, TypeError and RuntimeError in Python.
#define ROBOCACHE_CHECK_VALUE(cond, ...) ROBOCACHE_CHECK_WITH(TORCH_CHECK_VALUE, cond, __VA_ARGS__)
#define ROBOCACHE_CHECK_TYPE(cond, ...) ROBOCACHE_CHECK_WITH(TORCH_CHECK_TYPE, cond, __VA_ARGS__)
#define ROBOCACHE_CHECK(cond, ...) ROBOCACHE_CHECK_WITH(TORCH_CHECK, cond, __VA_ARGS__)

// On symbolic sizes: a deferred runtime assert rather than a guard (like
// TORCH_SYM_CHECK), raising ValueError like the other shape checks.
#define ROBOCACHE_SYM_CHECK(cond, ...) \
  ROBOCACHE_CHECK_VALUE((cond).expect_true(__FILE__, __LINE__), __VA_ARGS__)
