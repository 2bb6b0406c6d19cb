// Recoverable errors: a value or an error carrying a message and an errno.
// (boost::system::result needs Boost >= 1.79; Debian 12 ships 1.74.)
#pragma once

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace magnet {

struct error {
  std::string message;
  int code = 0;  // errno when it came from the system, else 0

  static error from_errno(std::string what, int err = errno) {
    return {std::move(what) + ": " + std::strerror(err), err};
  }
};

// Unrecoverable: only main() catches it.
struct fatal : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class T>
class [[nodiscard]] result {
 public:
  result(T v) : v_(std::move(v)) {}
  result(error e) : v_(std::move(e)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return checked(); }
  T&& value() && { return std::move(checked()); }
  const T& value() const& { return const_cast<result*>(this)->checked(); }
  T* operator->() { return &checked(); }
  T& operator*() { return checked(); }
  const error& err() const { return std::get<1>(v_); }

 private:
  T& checked() {
    if (!ok()) throw fatal(std::get<1>(v_).message);
    return std::get<0>(v_);
  }
  std::variant<T, error> v_;
};

template <>
class [[nodiscard]] result<void> {
 public:
  result() = default;
  result(error e) : e_(std::move(e)), failed_(true) {}
  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const error& err() const { return e_; }
  void value() const {
    if (failed_) throw fatal(e_.message);
  }

 private:
  error e_;
  bool failed_ = false;
};

using status = result<void>;

}  // namespace magnet
