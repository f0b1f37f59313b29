// Status and Result: the error path's own contracts.
#include <gtest/gtest.h>

#include <string>

#include "sinkrt/runtime/status.h"

namespace sinkrt {
namespace {

TEST(Result, BuiltFromAnOkStatusIsAnInternalError) {
  Result<int> r = Status::Ok();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_NE(r.status().message().find("OK status"), std::string::npos) << r.status().message();
}

TEST(Result, HoldsAValueOrTheError) {
  Result<std::string> v = std::string("x");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "x");
  EXPECT_TRUE(v.status().ok());
  Result<std::string> e = NotFound("no such file 'a'");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
}

int context_evaluations = 0;
std::string Context() {
  ++context_evaluations;
  return "loading 'a'";
}

Status ReturnIfError(const Status& s) {
  SINKRT_RETURN_IF_ERROR(s, Context());
  return Status::Ok();
}
Status ReturnIfErrorPlain(const Status& s) {
  SINKRT_RETURN_IF_ERROR(s);
  return Status::Ok();
}
Result<int> AssignOrReturn(Result<int> r) {
  SINKRT_ASSIGN_OR_RETURN(const int v, std::move(r), Context());
  return v + 1;
}

TEST(StatusMacros, ContextIsAddedOnlyOnError) {
  context_evaluations = 0;
  EXPECT_TRUE(ReturnIfError(Status::Ok()).ok());
  EXPECT_EQ(context_evaluations, 0);
  Status s = ReturnIfError(InvalidArgument("bad magic"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "loading 'a': bad magic");
  EXPECT_EQ(context_evaluations, 1);
  EXPECT_EQ(ReturnIfErrorPlain(Aborted("stopped")).message(), "stopped");
}

TEST(StatusMacros, AssignOrReturnKeepsTheCodeAndAddsContext) {
  context_evaluations = 0;
  Result<int> ok = AssignOrReturn(41);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 42);
  EXPECT_EQ(context_evaluations, 0);
  Result<int> bad = AssignOrReturn(OutOfRange("index 9 of 3"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(bad.status().message(), "loading 'a': index 9 of 3");
  EXPECT_EQ(context_evaluations, 1);
}

}  // namespace
}  // namespace sinkrt
