#include "dualpath/common/status.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <set>
#include <string>

namespace dualpath {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), Code::kOk);
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_TRUE(Status::Ok().ok());
}

TEST(StatusTest, CarriesCodeAndContext) {
  Status s = IoError("pread block=ab12 off=4096", ENOENT);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kIoError);
  EXPECT_NE(s.message().find("pread block=ab12 off=4096"), std::string::npos);
  EXPECT_NE(s.message().find("No such file"), std::string::npos);
  EXPECT_NE(s.ToString().find("kIoError"), std::string::npos);
  Status wrapped = s.WithContext("open store");
  EXPECT_EQ(wrapped.code(), Code::kIoError);
  EXPECT_EQ(wrapped.message().rfind("open store: pread", 0), 0u);
  EXPECT_TRUE(Status::Ok().WithContext("x").ok());
}

TEST(StatusTest, EveryHelperSetsItsCode) {
  EXPECT_EQ(InvalidArgument("a").code(), Code::kInvalidArgument);
  EXPECT_EQ(NotFound("a").code(), Code::kNotFound);
  EXPECT_EQ(AlreadyExists("a").code(), Code::kAlreadyExists);
  EXPECT_EQ(OutOfRange("a").code(), Code::kOutOfRange);
  EXPECT_EQ(IoError("a").code(), Code::kIoError);
  EXPECT_EQ(IoError("a").message(), "a");
  EXPECT_EQ(Corruption("a").code(), Code::kCorruption);
  EXPECT_EQ(ResourceExhausted("a").code(), Code::kResourceExhausted);
  EXPECT_EQ(Timeout("a").code(), Code::kTimeout);
  EXPECT_EQ(Unavailable("a").code(), Code::kUnavailable);
  EXPECT_EQ(PermissionDenied("a").code(), Code::kPermissionDenied);
  EXPECT_EQ(FailedPrecondition("a").code(), Code::kFailedPrecondition);
  EXPECT_EQ(Unimplemented("a").code(), Code::kUnimplemented);
  EXPECT_EQ(Internal("a").code(), Code::kInternal);
  EXPECT_EQ(ParseError("a").code(), Code::kParseError);
}

TEST(StatusTest, ErrnoMapping) {
  EXPECT_EQ(ErrnoStatus("x", EACCES).code(), Code::kPermissionDenied);
  EXPECT_EQ(ErrnoStatus("x", EPERM).code(), Code::kPermissionDenied);
  EXPECT_EQ(ErrnoStatus("x", ENOENT).code(), Code::kNotFound);
  EXPECT_EQ(ErrnoStatus("x", ENOSPC).code(), Code::kStorageNoSpace);
  EXPECT_EQ(ErrnoStatus("x", EFBIG).code(), Code::kStorageNoSpace);
  EXPECT_EQ(ErrnoStatus("x", ENOTDIR).code(), Code::kInvalidArgument);
  EXPECT_EQ(ErrnoStatus("x", EISDIR).code(), Code::kInvalidArgument);
  EXPECT_EQ(ErrnoStatus("x", EEXIST).code(), Code::kAlreadyExists);
  EXPECT_EQ(ErrnoStatus("x", EIO).code(), Code::kIoError);
}

TEST(StatusTest, CodeTableIsConsistent) {
  EXPECT_EQ(CodeName(Code::kKvChecksumMismatch), "kKvChecksumMismatch");
  EXPECT_EQ(CodeDescription(Code::kIoError), "I/O error");
  EXPECT_EQ(CodeName(static_cast<Code>(99999)), "kUnknown");
  EXPECT_EQ(CodeDescription(static_cast<Code>(99999)), "unknown error");
  EXPECT_EQ(CodeComponent(Code::kIoError), "common");
  EXPECT_EQ(CodeComponent(Code::kKvBadMagic), "kv");
  EXPECT_EQ(CodeComponent(Code::kStorageMiss), "storage");
  EXPECT_EQ(CodeComponent(Code::kPoolFull), "pool");
  EXPECT_EQ(CodeComponent(Code::kTransferPeerDead), "transfer");
  EXPECT_EQ(CodeComponent(Code::kSchedNoEngine), "sched");
  EXPECT_EQ(CodeComponent(Code::kTestbedNotRoot), "testbed");
  EXPECT_EQ(CodeComponent(Code::kCliUsage), "cli");
  EXPECT_EQ(CodeComponent(Code::kStoreUnknownPut), "store");
  EXPECT_EQ(CodeComponent(Code::kCoordLeaseLost), "coord");
  EXPECT_EQ(CodeComponent(static_cast<Code>(-1)), "unknown");
  EXPECT_EQ(CodeComponent(static_cast<Code>(50000)), "unknown");
  // Names are unique.
  std::set<std::string_view> names;
#define DUALPATH_X(name, value, desc) EXPECT_TRUE(names.insert(#name).second) << #name;
  DUALPATH_STATUS_CODES(DUALPATH_X)
#undef DUALPATH_X
}

Result<int> Half(int x) {
  if (x % 2 != 0) {
    return InvalidArgument("odd: " + std::to_string(x));
  }
  return x / 2;
}

Result<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  RETURN_IF_ERROR(Half(x).status());
  return Status::Ok();
}

TEST(ResultTest, ValueAndError) {
  Result<int> ok = Half(8);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 4);
  EXPECT_EQ(ok.value(), 4);
  EXPECT_TRUE(ok.status().ok());
  Result<int> bad = Half(3);
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(bad.value_or(-1), -1);
  EXPECT_EQ(ok.value_or(-1), 4);
}

TEST(ResultTest, Macros) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), Code::kInvalidArgument);
  EXPECT_NE(Quarter(6).status().message().find("odd: 3"), std::string::npos);
  EXPECT_TRUE(CheckEven(2).ok());
  EXPECT_FALSE(CheckEven(3).ok());
}

TEST(ResultTest, OkStatusWithoutValueBecomesInternal) {
  Result<int> r{Status::Ok()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInternal);
}

TEST(ResultTest, MoveOnlyValue) {
  Result<std::unique_ptr<int>> r(std::make_unique<int>(7));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r->get(), 7);
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 7);
}

TEST(ResultDeathTest, ValueOfErrorAborts) {
  Result<int> bad = Half(3);
  EXPECT_DEATH((void)bad.value(), "Result::value\\(\\) on an error");
}

}  // namespace
}  // namespace dualpath
