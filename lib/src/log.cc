#include "magnet/log.h"

#include <sys/stat.h>

#include <atomic>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace magnet {
namespace {
std::atomic<int> g_verbosity{1};

bool parse_u64(std::string_view s, unsigned long long& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}
}  // namespace

int log_verbosity() { return g_verbosity.load(std::memory_order_relaxed); }
void set_log_verbosity(int v) { g_verbosity.store(v, std::memory_order_relaxed); }

int verbosity_needed(severity s) {
  switch (s) {
    case severity::error: return 0;
    case severity::warning:
    case severity::notice: return 1;
    case severity::info: return 2;
    case severity::debug: return 3;
  }
  return 3;
}

std::string_view severity_name(severity s) {
  switch (s) {
    case severity::error: return "error";
    case severity::warning: return "warning";
    case severity::notice: return "notice";
    case severity::info: return "info";
    case severity::debug: return "debug";
  }
  return "debug";
}

std::string format_log_line(severity s, std::string_view msg, bool journal,
                            std::chrono::system_clock::time_point t) {
  std::string out;
  if (journal) {
    out = "<" + std::to_string(static_cast<int>(s)) + ">";
  } else {
    using namespace std::chrono;
    const auto ms = duration_cast<milliseconds>(t.time_since_epoch()).count();
    const std::time_t secs = static_cast<std::time_t>(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char b[40];
    const size_t n = std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm);
    std::snprintf(b + n, sizeof b - n, ".%03dZ ", static_cast<int>(ms - int64_t{secs} * 1000));
    out = b;
    out += severity_name(s);
    out += ' ';
  }
  out += msg;
  return out;
}

bool is_journal_stream(int fd, const char* journal_stream) {
  if (!journal_stream) return false;
  std::string_view v(journal_stream);
  const auto colon = v.find(':');
  unsigned long long dev = 0, ino = 0;
  if (colon == std::string_view::npos || !parse_u64(v.substr(0, colon), dev) ||
      !parse_u64(v.substr(colon + 1), ino))
    return false;
  struct stat st {};
  if (fstat(fd, &st) != 0) return false;
  return static_cast<unsigned long long>(st.st_dev) == dev &&
         static_cast<unsigned long long>(st.st_ino) == ino;
}

void log_line_from(int min, severity s, const std::string& msg) {
  if (min > log_verbosity()) return;
  // Looked up per line (a getenv and an fstat, off every hot path): stderr
  // may be redirected after start, and a child's stderr is not its
  // parent's journal stream even though JOURNAL_STREAM is inherited.
  const bool journal = is_journal_stream(2, std::getenv("JOURNAL_STREAM"));
  const auto now = std::chrono::system_clock::now();
  std::string out;
  // One prefix per line, so a multi-line message (a verifier log) keeps
  // its severity on every line in the journal.
  std::string_view rest(msg);
  do {
    const auto nl = rest.find('\n');
    out += format_log_line(s, rest.substr(0, nl), journal, now);
    out += '\n';
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  } while (!rest.empty());
  std::fwrite(out.data(), 1, out.size(), stderr);
}

void log_line(severity s, const std::string& msg) { log_line_from(verbosity_needed(s), s, msg); }

}  // namespace magnet
