/// \file
/// Status and Result<T>: the error path of runtime and device code.
///
/// No exceptions cross a library boundary in sinkrt: a daemon that must
/// survive a bad job needs values, not unwinding. A Status carries a code (the
/// canonical codes, as in absl/IREE) and a message that names what is wrong;
/// callers add context on the way up, with the optional second argument of
/// SINKRT_RETURN_IF_ERROR / SINKRT_ASSIGN_OR_RETURN (evaluated only on error).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>

/// All of sinkrt. The runtime library (CMake target sinkrt::runtime) declares
/// its types here directly; the host and device libraries nest their own.
namespace sinkrt {

/// The canonical error codes (as in absl and IREE); kOk is success.
enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,     ///< the caller passed something malformed (bad stream, bad shape)
  kOutOfRange,          ///< an index or offset outside its table or the arena
  kFailedPrecondition,  ///< valid input, wrong state (run before load)
  kNotFound,            ///< a named file, buffer or program does not exist
  kDeadlineExceeded,    ///< a bounded wait ran out (dry queue, peer timeout)
  kResourceExhausted,   ///< a bounded resource is full (arena, queue)
  kUnimplemented,       ///< a valid request this build does not support
  kUnavailable,         ///< a peer or device went away
  kAborted,             ///< the job was stopped
  kInternal,            ///< an invariant of ours broke: a bug
  kPermissionDenied,    ///< the caller may not do this (wrong token)
};

/// The code's name as ToString writes it ("INVALID_ARGUMENT").
const char* StatusCodeName(StatusCode code);

/// Success, or an error code with a message that names what went wrong.
class [[nodiscard]] Status {
 public:
  Status() = default;
  /// An error (or, with kOk, success) with its message.
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  /// Success.
  static Status Ok() { return Status(); }

  /// Whether this is success.
  bool ok() const { return code_ == StatusCode::kOk; }
  /// The code and the message (empty on success).
  /// @{
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  /// @}

  /// "context: message", keeping the code.
  Status WithContext(const std::string& context) const;
  /// "CODE_NAME: message"
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

/// One constructor per error code: the Status of that code with message `m`.
/// @{
inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
/// @}

/// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  /// Success: holds `value`.
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  /// An OK status carries no value: that is a bug of the code that returned
  /// it, so it becomes an internal error here instead of a Result that
  /// claims ok() and holds nothing.
  Result(Status status)  // NOLINT: implicit by design
      : v_(status.ok() ? Internal("a Result was built from an OK status, with no value") : std::move(status)) {}

  /// Whether this holds a value.
  bool ok() const { return std::holds_alternative<T>(v_); }
  /// The error, or an OK Status when this holds a value.
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  /// The value; only when ok().
  /// @{
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  /// @}
  /// The value's members and the value itself; only when ok().
  /// @{
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  /// @}

 private:
  std::variant<T, Status> v_;
};

}  // namespace sinkrt

#define SINKRT_CONCAT_INNER(a, b) a##b
#define SINKRT_CONCAT(a, b) SINKRT_CONCAT_INNER(a, b)

namespace sinkrt::status_internal {
inline Status WithOptionalContext(Status s) { return s; }
inline Status WithOptionalContext(const Status& s, const std::string& context) { return s.WithContext(context); }
}  // namespace sinkrt::status_internal

/// SINKRT_RETURN_IF_ERROR(status_expr) returns the status if it is an error.
/// SINKRT_RETURN_IF_ERROR(status_expr, context) returns it as
/// "context: message"; `context` is a std::string expression evaluated only
/// when there is an error, so building it costs nothing on the good path.
#define SINKRT_RETURN_IF_ERROR(expr, ...)                                                                 \
  do {                                                                                                    \
    ::sinkrt::Status _st = (expr);                                                                        \
    if (!_st.ok()) return ::sinkrt::status_internal::WithOptionalContext(_st __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

/// SINKRT_ASSIGN_OR_RETURN(lhs, result_expr[, context]): `lhs = value`, or
/// return the error (with the optional context, as above).
#define SINKRT_ASSIGN_OR_RETURN(lhs, expr, ...) \
  SINKRT_ASSIGN_OR_RETURN_IMPL(SINKRT_CONCAT(_res_, __LINE__), lhs, expr __VA_OPT__(, ) __VA_ARGS__)
#define SINKRT_ASSIGN_OR_RETURN_IMPL(res, lhs, expr, ...)                                                        \
  auto res = (expr);                                                                                             \
  if (!res.ok()) return ::sinkrt::status_internal::WithOptionalContext(res.status() __VA_OPT__(, ) __VA_ARGS__); \
  lhs = std::move(res).value()
