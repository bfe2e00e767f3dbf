#include "dualpath/common/file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstring>
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

// Issue 25 item 3: the old temporary was `<target>.tmp.<pid>`, opened with O_CREAT | O_TRUNC, so a
// symlink planted at that name in a shared directory made the write land on the link's target.
TEST_F(FileTest, WriteOutputFileNeverWritesThroughAPlantedTemporaryName) {
  const std::string victim = Write("victim", "precious");
  const std::string out = dir_ + "/out.json";
  const std::string planted = out + ".tmp." + std::to_string(::getpid());
  ASSERT_EQ(::symlink(victim.c_str(), planted.c_str()), 0);
  Status s = WriteOutputFile(out, "new content", "--json");
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(*ReadRegularFile(victim, "victim"), "precious");
  EXPECT_EQ(*ReadRegularFile(out, "out"), "new content");
  struct stat st {};
  ASSERT_EQ(::lstat(planted.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the planted name is not ours: left as it was";
  EXPECT_EQ(st.st_mode & 0777, 0777u);
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077 & ~0055u, 0u) << "an output is 0644 less the umask";
}

TEST_F(FileTest, WriteOutputFileRefusesASymlinkTarget) {
  const std::string victim = Write("victim", "precious");
  const std::string link = dir_ + "/out.json";
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  Status s = WriteOutputFile(link, "x", "--json");
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(HasMessage(s, "--json " + link + " is a symbolic link")) << s.ToString();
  EXPECT_EQ(*ReadRegularFile(victim, "victim"), "precious");
  struct stat st {};
  ASSERT_EQ(::lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  // A dangling link is refused too (following it would create a file wherever it points).
  const std::string dangling = dir_ + "/dangling.json";
  ASSERT_EQ(::symlink((dir_ + "/elsewhere").c_str(), dangling.c_str()), 0);
  EXPECT_EQ(WriteOutputFile(dangling, "x", "--json").code(), Code::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/elsewhere"));
}

TEST_F(FileTest, WriteOutputFileRefusesFifoWithoutBlocking) {
  // No reader ever opens it: the old in-place open would hang this test (ctest's timeout).
  const std::string fifo = dir_ + "/out.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Status s = WriteOutputFile(fifo, "x", "--json");
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(HasMessage(s, "is not a regular file (a FIFO)")) << s.ToString();
  Result<UniqueFd> fd = CreateOutputFile(fifo, "log");
  EXPECT_EQ(fd.status().code(), Code::kInvalidArgument) << fd.status().ToString();
}

TEST_F(FileTest, WriteOutputFileRefusesBlockDevice) {
  // A device node of its own (loop major 7): only root may make one; it is never opened.
  const std::string dev = dir_ + "/blockdev";
  if (::mknod(dev.c_str(), S_IFBLK | 0600, makedev(7, 250)) != 0) {
    GTEST_SKIP() << "cannot make a block device node here (needs root): " << std::strerror(errno);
  }
  Status s = WriteOutputFile(dev, "x", "--json");
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(HasMessage(s, "is not a regular file (a block device)")) << s.ToString();
}

TEST_F(FileTest, WriteOutputFileTakesNamesOf255Bytes) {
  // The old temporary appended ".tmp.<pid>" to the name: past NAME_MAX for a long target.
  const std::string out = dir_ + "/" + std::string(250, 'n') + ".json";
  Status s = WriteOutputFile(out, "long", "--json");
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(*ReadRegularFile(out, "out"), "long");
  ASSERT_TRUE(WriteOutputFile(out, "again", "--json").ok());
  EXPECT_EQ(*ReadRegularFile(out, "out"), "again");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 1);
}

TEST_F(FileTest, WriteOutputFileWritesCharacterDevicesInPlace) {
  EXPECT_TRUE(WriteOutputFile("/dev/null", "x", "--json").ok());
}

TEST_F(FileTest, CreateOutputFileTruncatesAndRefusesLinks) {
  const std::string log = Write("log", "old old old");
  Result<UniqueFd> fd = CreateOutputFile(log, "log");
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  ASSERT_EQ(::write(fd->get(), "new", 3), 3);
  fd = UniqueFd();
  EXPECT_EQ(*ReadRegularFile(log, "log"), "new");
  const std::string victim = Write("victim", "precious");
  const std::string link = dir_ + "/link.log";
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  Result<UniqueFd> refused = CreateOutputFile(link, "log");
  EXPECT_EQ(refused.status().code(), Code::kInvalidArgument) << refused.status().ToString();
  EXPECT_EQ(*ReadRegularFile(victim, "victim"), "precious");
  Result<UniqueFd> fresh = CreateOutputFile(dir_ + "/fresh.log", "log");
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
}

TEST_F(FileTest, FileLockIsExclusiveAndNamesTheHolder) {
  const std::string path = dir_ + "/x.lock";
  Result<FileLock> first = FileLock::TryAcquire(path);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // Another open of the file, even in this process, does not get it.
  Result<FileLock> second = FileLock::TryAcquire(path);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kUnavailable);
  EXPECT_TRUE(HasMessage(second.status(), "pid " + std::to_string(::getpid()) + " holds " + path))
      << second.status().ToString();
  first = Result<FileLock>(InvalidArgument("released"));  // drops the claim
  EXPECT_TRUE(FileLock::TryAcquire(path).ok());
  // Never through a symlink planted at the lock's name.
  const std::string victim = Write("victim", "precious");
  const std::string link = dir_ + "/link.lock";
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  EXPECT_FALSE(FileLock::TryAcquire(link).ok());
  EXPECT_EQ(*ReadRegularFile(victim, "victim"), "precious");
}

}  // namespace
}  // namespace dualpath
