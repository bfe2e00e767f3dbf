#include "dualpath/common/log.h"

#include <gtest/gtest.h>

namespace dualpath::log {
namespace {

TEST(LogTest, ParseAndName) {
  for (Level l :
       {Level::kTrace, Level::kDebug, Level::kInfo, Level::kWarn, Level::kError, Level::kOff}) {
    Result<Level> parsed = ParseLevel(LevelName(l));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, l);
  }
  EXPECT_EQ(*ParseLevel("warning"), Level::kWarn);
  Result<Level> bad = ParseLevel("loud");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("loud"), std::string::npos);
}

TEST(LogTest, LevelFilters) {
  Level saved = GetLevel();
  SetLevel(Level::kWarn);
  EXPECT_EQ(GetLevel(), Level::kWarn);
  EXPECT_FALSE(Enabled(Level::kInfo));
  EXPECT_TRUE(Enabled(Level::kWarn));
  EXPECT_TRUE(Enabled(Level::kError));
  EXPECT_FALSE(Enabled(Level::kOff));
  SetLevel(Level::kOff);
  EXPECT_FALSE(Enabled(Level::kError));
  SetLevel(saved);
}

TEST(LogTest, WritesToStderr) {
  Level saved = GetLevel();
  SetLevel(Level::kInfo);
  testing::internal::CaptureStderr();
  Info("hello {} {}", "world", 42);
  Debug("hidden {}", 1);
  Warn("careful");
  Error("broken");
  Trace("hidden");
  std::string out = testing::internal::GetCapturedStderr();
  SetLevel(saved);
  EXPECT_NE(out.find("hello world 42"), std::string::npos);
  EXPECT_NE(out.find("careful"), std::string::npos);
  EXPECT_NE(out.find("broken"), std::string::npos);
  EXPECT_EQ(out.find("hidden"), std::string::npos);
}

}  // namespace
}  // namespace dualpath::log
