#include "dualpath/common/file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace dualpath {
namespace {

// A fresh directory under the test temp dir, removed with everything in it.
class FileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/dp-file-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string Write(const std::string& name, const std::string& content) {
    const std::string p = dir_ + "/" + name;
    std::ofstream(p) << content;
    return p;
  }
  bool HasMessage(const Status& s, const std::string& part) {
    return s.message().find(part) != std::string::npos;
  }
  std::string dir_;
};

TEST_F(FileTest, ReadsRegularFile) {
  const std::string p = Write("a.json", "{\"x\": 1}\n");
  Result<std::string> r = ReadRegularFile(p, "--config");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "{\"x\": 1}\n");
  Result<std::string> empty = ReadRegularFile(Write("empty", ""), "x");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "");
}

TEST_F(FileTest, ReadsProcFilesThatReportSizeZero) {
  Result<std::string> r = ReadRegularFile("/proc/self/status", "status");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->find("Pid:"), std::string::npos);
}

TEST_F(FileTest, RefusesDirectory) {
  Result<std::string> r = ReadRegularFile(dir_, "--config");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(HasMessage(r.status(), "--config " + dir_ + " is not a regular file (a directory)"))
      << r.status().ToString();
}

TEST_F(FileTest, RefusesCharacterDevice) {
  Result<std::string> r = ReadRegularFile("/dev/zero", "trace");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(HasMessage(r.status(), "character device")) << r.status().ToString();
}

TEST_F(FileTest, RefusesFifoWithoutBlocking) {
  // No writer ever opens it: a blocking open would hang this test (ctest's timeout fails it).
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Result<std::string> r = ReadRegularFile(fifo, "trace");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(HasMessage(r.status(), "a FIFO")) << r.status().ToString();
}

TEST_F(FileTest, MissingFileIsNotFound) {
  Result<std::string> r = ReadRegularFile(dir_ + "/nope", "trace");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_TRUE(HasMessage(r.status(), dir_ + "/nope"));
}

TEST_F(FileTest, MissingInputFileIsBadInput) {
  Result<std::string> r = ReadInputFile(dir_ + "/nope", "--config");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(HasMessage(r.status(), "--config " + dir_ + "/nope does not exist"))
      << r.status().ToString();
  EXPECT_EQ(*ReadInputFile(Write("in", "abc"), "--config"), "abc");
}

TEST_F(FileTest, RefusesFileAboveLimit) {
  const std::string p = Write("big", std::string(100, 'x'));
  Result<std::string> r = ReadRegularFile(p, "model", 99);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(HasMessage(r.status(), "limit of 99 bytes")) << r.status().ToString();
  EXPECT_TRUE(ReadRegularFile(p, "model", 100).ok());
}

TEST_F(FileTest, OpenRegularFileReturnsBlockingDescriptor) {
  Result<UniqueFd> fd = OpenRegularFile(Write("f", "abc"), "f");
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_EQ(::fcntl(fd->get(), F_GETFL) & O_NONBLOCK, 0);
  char buf[4];
  EXPECT_EQ(::read(fd->get(), buf, sizeof(buf)), 3);
}

TEST_F(FileTest, DirectOpenOfNonRegularFileNamesTheKind) {
  Result<UniqueFd> fd = OpenRegularFile("/dev/zero", "file", O_DIRECT);
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(HasMessage(fd.status(), "is not a regular file (a character device)"))
      << fd.status().ToString();
}

TEST_F(FileTest, CheckDirectory) {
  EXPECT_TRUE(CheckDirectory(dir_, "--dir").ok());
  Status s = CheckDirectory(Write("f", "x"), "--dir");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(HasMessage(s, "is not a directory")) << s.ToString();
  Status missing = CheckDirectory(dir_ + "/nope", "--dir");
  EXPECT_EQ(missing.code(), Code::kInvalidArgument);
  EXPECT_TRUE(HasMessage(missing, "does not exist")) << missing.ToString();
}

TEST_F(FileTest, WriteOutputFileReplacesWhole) {
  const std::string p = Write("out.json", "old");
  ASSERT_TRUE(WriteOutputFile(p, "new content", "--json").ok());
  std::ifstream in(p);
  std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, "new content");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 1);  // no temporary
}

TEST_F(FileTest, WriteOutputFileFailsInMissingDirectory) {
  const std::string p = dir_ + "/no/such/dir/out.json";
  Status s = WriteOutputFile(p, "x", "--json");
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_TRUE(HasMessage(s, "--json " + p)) << s.ToString();
}

TEST_F(FileTest, WriteOutputFileRefusesDirectory) {
  Status s = WriteOutputFile(dir_, "x", "--json");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(HasMessage(s, "is a directory")) << s.ToString();
}

TEST_F(FileTest, WriteOutputFileReportsFullDevice) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no writable /dev/full";
  Status s = WriteOutputFile("/dev/full", std::string(8192, 'x'), "--json");
  EXPECT_EQ(s.code(), Code::kStorageNoSpace) << s.ToString();
  EXPECT_TRUE(HasMessage(s, "--json /dev/full")) << s.ToString();
}

TEST_F(FileTest, WriteOutputFileLeavesNothingWhenDirectoryIsReadOnly) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only directories";
  const std::string ro = dir_ + "/ro";
  ASSERT_EQ(::mkdir(ro.c_str(), 0500), 0);
  Status s = WriteOutputFile(ro + "/out.json", "x", "--json");
  EXPECT_EQ(s.code(), Code::kPermissionDenied) << s.ToString();
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(ro), {}), 0);
  ::chmod(ro.c_str(), 0700);
}

}  // namespace
}  // namespace dualpath
