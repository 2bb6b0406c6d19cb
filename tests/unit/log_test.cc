// The logger's lines (lib/src/log.cc): a time and a severity before each
// message on a terminal or in a file, the syslog priority alone when stderr
// is the journal, and the verbosity that shows each severity.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "magnet/log.h"

namespace magnet {
namespace {

using namespace std::chrono;

system_clock::time_point at(int y, int mo, int d, int h, int mi, int s, int ms) {
  return sys_days{year{y} / mo / d} + hours{h} + minutes{mi} + seconds{s} + milliseconds{ms};
}

std::string dev_ino(int fd, int ino_offset = 0) {
  struct stat st {};
  EXPECT_EQ(fstat(fd, &st), 0);
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino + ino_offset);
}

TEST(Log, ALineOutsideTheJournalStartsWithItsUtcTimeInMillisecondsAndItsSeverity) {
  EXPECT_EQ(format_log_line(severity::notice, "magnet-host: [started] probes x", false,
                            at(2026, 11, 27, 4, 1, 5, 123)),
            "2026-11-27T04:01:05.123Z notice magnet-host: [started] probes x");
  // Leading zeros of every field, and a whole second.
  EXPECT_EQ(format_log_line(severity::error, "m", false, at(2027, 1, 2, 3, 4, 5, 7)),
            "2027-01-02T03:04:05.007Z error m");
  EXPECT_EQ(format_log_line(severity::debug, "m", false, at(2027, 12, 31, 23, 59, 59, 0)),
            "2027-12-31T23:59:59.000Z debug m");
}

TEST(Log, EverySeverityHasItsNameAndItsSyslogPriority) {
  const std::pair<severity, const char*> all[] = {{severity::error, "error"},
                                                  {severity::warning, "warning"},
                                                  {severity::notice, "notice"},
                                                  {severity::info, "info"},
                                                  {severity::debug, "debug"}};
  int priority = 3;  // RFC 5424: err 3, warning 4, notice 5, info 6, debug 7
  for (const auto& [s, name] : all) {
    EXPECT_EQ(severity_name(s), name);
    const auto t = at(2026, 11, 27, 4, 1, 5, 123);
    EXPECT_EQ(format_log_line(s, "magnet-host: [vm.up] g1", false, t),
              std::string("2026-11-27T04:01:05.123Z ") + name + " magnet-host: [vm.up] g1");
    EXPECT_EQ(format_log_line(s, "magnet-host: [vm.up] g1", true, t),
              "<" + std::to_string(priority) + ">magnet-host: [vm.up] g1");
    ++priority;
  }
}

TEST(Log, TheJournalIsTheStreamJournalStreamNamesAndNoOther) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  EXPECT_TRUE(is_journal_stream(p[1], dev_ino(p[1]).c_str()));
  EXPECT_FALSE(is_journal_stream(p[1], dev_ino(p[1], 1).c_str()));  // another pipe's inode
  int q[2];
  ASSERT_EQ(pipe(q), 0);
  EXPECT_FALSE(is_journal_stream(q[1], dev_ino(p[1]).c_str()));
  EXPECT_FALSE(is_journal_stream(p[1], nullptr));
  for (const char* bad : {"", ":", "12", "12:", ":34", "x:y", "1:2:3", "-1:5", "1 :5"})
    EXPECT_FALSE(is_journal_stream(p[1], bad)) << bad;
  for (int fd : {p[0], p[1], q[0], q[1]}) close(fd);
}

// Captures what the logger writes to stderr while it lives.
class StderrCapture {
 public:
  StderrCapture() {
    EXPECT_EQ(pipe2(p_, O_NONBLOCK), 0);
    saved_ = dup(2);
    dup2(p_[1], 2);
  }
  ~StderrCapture() {
    dup2(saved_, 2);
    close(saved_);
    close(p_[0]);
    close(p_[1]);
    unsetenv("JOURNAL_STREAM");
    set_log_verbosity(1);
  }
  std::string pipe_dev_ino() const { return dev_ino(p_[1]); }
  std::string take() {
    std::string out;
    char b[4096];
    for (ssize_t n; (n = read(p_[0], b, sizeof b)) > 0;) out.append(b, static_cast<size_t>(n));
    return out;
  }

 private:
  int p_[2] = {-1, -1};
  int saved_ = -1;
};

TEST(Log, StderrThatIsTheJournalGetsThePriorityPrefixAndNoTime) {
  StderrCapture c;
  setenv("JOURNAL_STREAM", c.pipe_dev_ino().c_str(), 1);
  log_notice("magnet-host: [vm.up] g1 id 1 qemu pid 42");
  log_warning("magnet-host: [deliver.bad_frame] vm g1: x");
  log_error("magnet host: views: bad");
  EXPECT_EQ(c.take(),
            "<5>magnet-host: [vm.up] g1 id 1 qemu pid 42\n"
            "<4>magnet-host: [deliver.bad_frame] vm g1: x\n"
            "<3>magnet host: views: bad\n");
}

TEST(Log, AJournalStreamOfAnotherFileMeansAnInheritedVariableAndLinesGetTheirTime) {
  StderrCapture c;
  setenv("JOURNAL_STREAM", (c.pipe_dev_ino() + "0").c_str(), 1);
  log_notice("magnet-host: [started] probes net.dev");
  const std::string out = c.take();
  EXPECT_TRUE(std::regex_match(
      out, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z notice magnet-host: \[started\] probes net\.dev\n)")))
      << out;
  // ... and the time is now's.
  const auto secs = duration_cast<seconds>(system_clock::now().time_since_epoch()).count();
  std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char day[16];
  std::strftime(day, sizeof day, "%Y-%m-%dT", &tm);
  EXPECT_EQ(out.substr(0, 11), day) << out;
}

TEST(Log, EachLineOfAMessageCarriesThePrefix) {
  StderrCapture c;
  setenv("JOURNAL_STREAM", c.pipe_dev_ino().c_str(), 1);
  set_log_verbosity(2);
  log_line_from(2, severity::warning, "libbpf: prog 'x': BPF program load failed\n0: R1=ctx\n1: exit");
  EXPECT_EQ(c.take(), "<4>libbpf: prog 'x': BPF program load failed\n<4>0: R1=ctx\n<4>1: exit\n");
}

TEST(Log, VerbosityShowsErrorsAlwaysNoticesByDefaultInfoWithVAndDebugWithVv) {
  StderrCapture c;
  setenv("JOURNAL_STREAM", c.pipe_dev_ino().c_str(), 1);
  auto all = [] {
    log_error("e");
    log_warning("w");
    log_notice("n");
    log_info("i");
    log_debug("d");
    log_line_from(4, severity::debug, "libbpf");
  };
  const std::pair<int, const char*> want[] = {
      {0, "<3>e\n"},
      {1, "<3>e\n<4>w\n<5>n\n"},
      {2, "<3>e\n<4>w\n<5>n\n<6>i\n"},
      {3, "<3>e\n<4>w\n<5>n\n<6>i\n<7>d\n"},
      {4, "<3>e\n<4>w\n<5>n\n<6>i\n<7>d\n<7>libbpf\n"}};
  for (const auto& [v, out] : want) {
    set_log_verbosity(v);
    all();
    EXPECT_EQ(c.take(), out) << "verbosity " << v;
  }
  EXPECT_EQ(verbosity_needed(severity::notice), 1);  // lifecycle lines at the default level
}

}  // namespace
}  // namespace magnet
