// The logger of every program: one line per message on stderr, each with a
// severity, filtered by verbosity.  libbpf's own log is routed here
// (capture.cc) so -v shows verifier output and nothing else does.
//
// On a terminal or in a file a line reads
//   2026-11-27T04:01:05.123Z notice magnet-host: [started] ...
// (RFC 3339 UTC time with milliseconds, then the severity).  When stderr is
// the journal (systemd sets JOURNAL_STREAM to its device:inode) it reads
//   <5>magnet-host: [started] ...
// instead: journald takes the syslog priority from the prefix and stamps the
// time itself.  The text after the prefix is the message unchanged, so
// operators' greps for "[vm.up]" work in both.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace magnet {

// Syslog priorities (RFC 5424), the numbers journald reads from "<N>".
enum class severity { error = 3, warning = 4, notice = 5, info = 6, debug = 7 };

// The verbosity the command line sets: 0 errors only, 1 (the default) also
// warnings and notices (lifecycle lines: started, stopped, vm.up...), 2 (-v)
// info, 3 (-vv) debug, 4 (-vvv) libbpf's debug output too.
int log_verbosity();
void set_log_verbosity(int v);

// The least verbosity that shows a line of @s: error 0, warning and notice 1,
// info 2, debug 3.
int verbosity_needed(severity s);
std::string_view severity_name(severity s);

// Writes @msg (each of its lines) as a line of severity @s when the
// verbosity shows it.
void log_line(severity s, const std::string& msg);
// The same, shown from verbosity @min on whatever its severity: libbpf's
// levels, which are one step quieter than magnet's own (its warnings at -v).
void log_line_from(int min, severity s, const std::string& msg);

inline void log_error(const std::string& m) { log_line(severity::error, m); }
inline void log_warning(const std::string& m) { log_line(severity::warning, m); }
inline void log_notice(const std::string& m) { log_line(severity::notice, m); }
inline void log_info(const std::string& m) { log_line(severity::info, m); }
inline void log_debug(const std::string& m) { log_line(severity::debug, m); }

// What log_line writes, for a message of one line: "<N>msg" for the journal,
// else "TIME SEVERITY msg"; no newline.
std::string format_log_line(severity s, std::string_view msg, bool journal,
                            std::chrono::system_clock::time_point t);
// Whether @fd is the stream @journal_stream names ("DEV:INO" in decimal, the
// JOURNAL_STREAM that systemd sets; null or malformed: no).
bool is_journal_stream(int fd, const char* journal_stream);

}  // namespace magnet
